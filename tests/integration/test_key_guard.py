"""The snapshot's key check off the delta's path, and the row counts without a scan.

A datamart with `lake.key_check_every_deltas: 2` and maintenance every 3 deltas, four deltas
landed one run each (real broker, Spark, Iceberg):
- delta 0 and delta 2 check the keys of the deltas since the previous check; delta 1 scans
  nothing (its check passes on the MERGE's own key rule, and says so), and its snapshot's rows
  of the tables it changed (from the commits' summaries) equal the truth's;
- an outside writer then puts a row of an existing key into a snapshot table: no delta's keys
  touch it, so only the check over every key finds it, which the maintaining run (delta 3) runs:
  it fails, naming the table and the key.
"""

from __future__ import annotations

import dagster as dg
import pytest

from platform_assets.deltas.partitions import partition_key
from tests.integration.test_delta_step import four_deltas_platform

pytestmark = pytest.mark.integration

DM = "marketing"
PK = "primary_key_unique"


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    yield from four_deltas_platform(kafka_bootstrap, tmp_path_factory.mktemp("key-guard"), seed=29, name="guard",
                                    lake={"key_check_every_deltas": 2, "maintenance": {"every_deltas": 3}})


def run(defs, instance, n: int):
    job = defs.resolve_job_def(f"{DM}_delta_job")
    return job.execute_in_process(partition_key=partition_key(n), instance=instance, raise_on_error=False)


def key_checks(result) -> list:
    return [c for c in result.get_asset_check_evaluations() if c.check_name == PK]


def snapshot_rows(result) -> dict[str, int]:
    mat = next(e.event_specific_data.materialization for e in result.get_asset_materialization_events()
               if e.asset_key == dg.AssetKey([DM, "snapshot"]))
    return {k.split("/", 1)[1]: v.value for k, v in mat.metadata.items() if k.startswith("rows/")}


def test_the_check_runs_every_k_deltas_and_the_counts_need_no_scan(platform):
    sc, defs, instance, _, _ = platform
    checked = {}
    for n in range(3):
        result = run(defs, instance, n)
        assert result.success, n
        truth = {t: len(rows) for t, rows in sc.truth[DM][n].items()}
        rows = snapshot_rows(result)
        assert rows == {t: truth[t] for t in rows}, n  # from a scan (0, 2) or from summaries (1): the same
        # A scan counts every table; the summaries, the tables the delta changed (the source's
        # mark answers for the others' progress, which is not read: issue 57).
        changed = {c.table for c in sc.increments[DM][n]}
        assert set(rows) == (set(truth) if n != 1 else changed), (n, rows)
        (check,) = key_checks(result)
        assert check.passed, n
        checked[n] = check.metadata
    # Delta 1 scans nothing: its check passes on the MERGEs' own key rule, and says so.
    assert "keys_of_deltas" not in checked[1] and checked[1]["next_scan_at_delta"].value == 2
    assert checked[1]["keys_checked"].value.startswith("the run's changes only")
    assert set(checked[0]["keys_of_deltas"].value.values()) == {"0"}
    assert set(checked[2]["keys_of_deltas"].value.values()) == {"0-2"}


def test_a_key_put_twice_by_another_writer_is_found_by_the_check_of_every_key(platform):
    sc, defs, instance, layout, spark = platform
    if partition_key(2) not in instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"])):
        for n in range(3):
            assert run(defs, instance, n).success
    table = next(t for t, rows in sorted(sc.truth[DM][2].items()) if rows)
    pk = sc.databases[DM].tables[table].primary_key
    ident = layout.snapshot(DM, table)
    table_rows = spark.table(ident)
    row = table_rows.limit(1).collect()[0]  # collected once: a limit may pick another row when run again
    key = {k: row[k] for k in pk}
    # An outside writer appends the row again: no delta, no increment row names the key.
    spark.createDataFrame([row], table_rows.schema).writeTo(ident).append()
    result = run(defs, instance, 3)
    (check,) = key_checks(result)
    assert not check.passed and check.metadata["keys_checked"].value == "every key"
    assert check.metadata["duplicated_keys"].value == {table: 1}
    named = ", ".join(f"{k}={v!r}" for k, v in key.items())
    assert check.metadata["named_keys"].value == {table: [named]}
    assert f"{DM}.{table}: 1 key(s) held by more than one row, e.g. ({named})" in check.description

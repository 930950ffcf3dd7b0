"""A range run says what each of its deltas did, partition by partition (issue 58).

Emulator -> real Kafka -> the sensor's index -> one range run of deltas 3-6 (as a backfill or a
sensor's backlog runs it) -> Iceberg. Each partition's materialization of the increment carries
that delta's own rows, upserts, deletes, rows per table, delta_date and offsets, equal to the
emulator's truth; the snapshot's rows sit on the range's last delta (as of which they were
counted), the other partitions say the range's end; the user mart `sales_by_store` has each
delta's own rows. Real broker, real Spark and Iceberg.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.deltas.partitions import partition_key
from platform_assets.deltas.requests import range_request
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish

pytestmark = pytest.mark.integration

DM = "marketing"
FIRST, LAST = 3, 6


def _metadata(instance: dg.DagsterInstance, asset: str, n: int) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([DM, asset]), asset_partitions=[partition_key(n)]), limit=1).records
    assert records, f"{DM}/{asset} has no materialization of partition {n}"
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def test_each_partition_of_a_range_run_carries_its_own_deltas_counts(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=58, deltas=LAST + 1, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, cancel_rate=0.0, faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"rangemeta.signal.{os.getpid()}", BACKUP: f"rangemeta.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    publish(sc.messages, kafka_bootstrap, topics)
    cfg = parse_config({
        "sources": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap}, "lake": {"catalog": "rangemeta", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"), "code": ["platform_assets.examples.marketing_marts"],
        "sensor": {"max_deltas_per_run": 4},
    }, str(tmp_path / "deltaport.yaml"))
    defs = build_definitions(cfg)
    job = defs.resolve_job_def(f"{DM}_delta_job")
    sensor = defs.resolve_sensor_def(f"{DM}_delta_close_sensor")
    with dg.instance_for_test() as instance:
        cursor, idle = None, 0
        while idle < 3:  # index everything and add the partitions; run nothing the sensor asks
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                         resources=defs.resources) as ctx:
                result = sensor(ctx)
            for req in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            cursor, idle = result.cursor, 0 if result.run_requests else idle + 1
        for first, last in ((0, FIRST - 1), (FIRST, LAST)):
            req = range_request(DM, first, last)
            assert job.execute_in_process(instance=instance, tags=req.tags).success

        ranged = list(range(FIRST, LAST + 1))
        for n in ranged:
            changes = sc.increments[DM][n]
            got = _metadata(instance, "increment", n)
            want_tables = Counter(c.table for c in changes)
            assert (got["rows"], got["upserts"], got["deletes"]) == (
                len(changes), sum(c.sys_op == 0 for c in changes), sum(c.sys_op == 1 for c in changes)), n
            per_table = {k.split("/", 1)[1]: v for k, v in got.items() if k.startswith("rows/")}
            assert set(want_tables) <= set(per_table), n  # a table the delta left alone may say 0
            assert per_table == {t: want_tables.get(t, 0) for t in per_table}, n
            assert got["delta_date"] == pytest.approx(sc.delta_dates[DM][n].replace(tzinfo=dt.timezone.utc).timestamp()), n
            assert got["deltas"] == f"{FIRST}-{LAST}" and got["range_rows"] == sum(
                len(sc.increments[DM][m]) for m in ranged)
            assert got["offsets"] and all(lo <= hi for lo, hi in got["offsets"].values()), n
            # the `tables` entry: the tables this delta changed, and no other
            listed = {r.data["table"]: r.data for r in got["tables"].records}
            assert {t: r["rows"] for t, r in listed.items()} == {
                f"rangemeta.{DM}_increment.{t}": c for t, c in want_tables.items()}, n
            assert all(r["columns"] for r in listed.values()), n
            assert _metadata(instance, "changelog", n)["increment_id"] == got["increment_id"]
            signal = _metadata(instance, "signal_events", n)
            assert signal["by_code"].get("DELTA_CLOSE") == 1 and signal["dagster/partition_row_count"] == signal["events"]
        offsets = [_metadata(instance, "increment", n)["offsets"] for n in ranged]
        assert len({str(o) for o in offsets}) == len(ranged), "each delta has its own offsets"

        truth_rows = {t: len(rows) for t, rows in sc.truth[DM][LAST].items()}
        snapshot = _metadata(instance, "snapshot", LAST)
        assert snapshot["rows"] == sum(truth_rows.values()) and snapshot["rows/sales"] == truth_rows["sales"]
        changed = {r.data["table"]: r.data["rows"] for r in snapshot["tables"].records}
        touched = {t for m in ranged for t in Counter(c.table for c in sc.increments[DM][m])}
        assert changed == {f"rangemeta.{DM}.{t}": truth_rows[t] for t in touched}
        for n in ranged[:-1]:
            earlier = _metadata(instance, "snapshot", n)
            assert "rows" not in earlier and "rows/sales" not in earlier, n
            assert (earlier["range_end_delta"], earlier["range_end_rows"]) == (LAST, snapshot["rows"]), n

        for n in ranged:  # the mart: units sold per store as of each delta, one row per store
            stores = {r["store_id"] for r in sc.truth[DM][n].get("sales", {}).values()}
            mart = _metadata(instance, "sales_by_store", n)
            assert mart["rows"] == mart["dagster/partition_row_count"] == len(stores), n
            assert mart["dagster/table_name"] == "rangemeta.marketing_marts.sales_by_store"
            assert [c.name for c in mart["dagster/column_schema"].columns] == ["store_id", "product_amount", "delta_num"]

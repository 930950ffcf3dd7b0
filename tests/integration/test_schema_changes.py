"""Column changes from the changelog DDL land in Iceberg without losing data.

The emulated story (marketing only) adds `stores.manager` before delta 2, renames `city` to
`town` and drops `region_code` before delta 4 (`column_changes_at_delta=2`); with seed 2 the
first try of delta 2 is cancelled (the DDL stays), and delta 4 updates and deletes some old
rows while most keep their values (the new name must carry them). (New tables appearing
mid-story are covered by test_platform.py; left out here to keep this test short.) It is published to a real
broker, indexed with the delta index, read with the Spark Kafka reader and landed with the lake
layer directly (no Dagster). At every delta each table, read the way the DDL of that delta
describes it, equals the emulator's truth; finally the Iceberg tables still hold the dropped and
renamed-away columns, with the values the rows had when the column went.

A second, synthetic story (DataFrames built here, no Kafka) covers what the emulator does not
play: a column dropped and added again (its stale values must not come back), a rename in a
delta that writes no row of the table, and a table dropped and created again (the old rows go
from the current snapshot, stay in its history).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.lake.layout import LakeLayout
from resources.lake.prostore import land_changelog, land_increment
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect
from tests.support.landing import land_delta, published_backup

pytestmark = pytest.mark.integration

DM = "marketing"
CONFIG = EmulatorConfig(seed=2, deltas=5, datamarts=(DM,), column_changes_at_delta=2, ddl_at_delta=None,
                        streams=2, chunk_size=5, backup_partitions=2, faults=Faults(duplicate_rate=0.05))


@pytest.fixture(scope="module")
def lake(spark_remote, tmp_path_factory):
    """A session of the tests' server with its own Iceberg catalog, `schemas`, for this module."""
    warehouse = tmp_path_factory.mktemp("schemas-lake")
    return connect(spark_remote, CatalogConfig(name="schemas", warehouse=str(warehouse))), LakeLayout("schemas")


def truth_rows(sc, n, table):
    key = sc.databases[DM].tables[table].primary_key
    return sorted(sc.truth[DM][n].get(table, {}).values(), key=lambda r: tuple(r[k] for k in key))


def test_column_changes_land_without_losing_data(lake, kafka_bootstrap, tmp_path):
    sc = build_scenario(CONFIG)
    stores = {n: sc.truth[DM][n]["stores"] for n in sc.truth[DM]}
    assert set(next(iter(stores[1].values()))) == {"id", "name", "city", "opened", "region_code"}
    assert set(next(iter(stores[4].values()))) == {"id", "name", "opened", "manager", "town"}
    assert sc.cancelled[DM] == [2]
    assert {c.sys_op for c in sc.increments[DM][4] if c.table == "stores" and (c.row["id"],) in stores[3]} == {0, 1}

    topic, index = published_backup(sc, kafka_bootstrap, tmp_path, "schemas")

    session, layout = lake
    for n in sorted(sc.truth[DM]):
        land_delta(session, layout, kafka_bootstrap, topic, index, DM, n)
        for table in sc.truth[DM][n]:
            assert rows_as_of(session, layout, DM, table, n) == truth_rows(sc, n, table), f"{table} as of delta {n}"
    # Time travel after everything landed still reads each delta under its own DDL.
    for n in (1, 2, 3):
        assert rows_as_of(session, layout, DM, "stores", n) == truth_rows(sc, n, "stores")

    # Nothing was dropped from Iceberg: the current snapshot row of a store keeps the value
    # it had when the column went, unless the store was written again since (then NULL).
    last = max(sc.truth[DM])
    current = {r["id"]: r.asDict() for r in session.table(layout.snapshot(DM, "stores")).collect()}
    assert set(next(iter(current.values()))) >= {"city", "region_code", "town", "manager"}
    written = {(c.row["id"],) for n in range(4, last + 1) for c in sc.increments[DM][n] if c.table == "stores"}
    kept = rewritten = 0
    for key, row in stores[last].items():
        old = stores[3].get(key)  # the state before the rename and the drop
        got = current[key[0]]
        if old is not None and key not in written:
            assert (got["city"], got["region_code"], got["town"]) == (old["city"], old["region_code"], row["town"])
            kept += 1
        else:
            assert (got["city"], got["region_code"]) == (None, None), key
            rewritten += 1
    assert kept and rewritten, (kept, rewritten)
    # ... and every value the dropped and renamed columns ever had is still in the history.
    history = {(r.id, r.city, r.region_code)
               for r in session.table(layout.increment(DM, "stores")).where("delta_num <= 3")
               .select("id", "city", "region_code").collect()}
    assert {(k[0], r["city"], r["region_code"]) for k, r in stores[3].items()} <= history


def test_column_added_again_and_table_created_again(lake):
    session, layout = lake
    dm = "synthetic"
    create = "CREATE TABLE synthetic.t (id BIGINT NOT NULL, a VARCHAR, b INT32, PRIMARY KEY (id)) DISTRIBUTED BY (id)"
    story = [  # (DDL run before the delta, the delta's changes as {column: value} with sys_op)
        ([create], [{"id": 1, "a": "x", "b": 10, "sys_op": 0}, {"id": 2, "a": "y", "b": 20, "sys_op": 0}]),
        (["ALTER TABLE synthetic.t DROP COLUMN b, ADD COLUMN c VARCHAR"], [{"id": 2, "a": "y2", "c": "c2", "sys_op": 0}]),
        # b again, a new column (NULL everywhere, not its old values); a renamed, no row written
        (["ALTER TABLE synthetic.t ADD COLUMN b INT32, RENAME COLUMN a TO a2"], []),
        (["DROP TABLE synthetic.t",
          "CREATE TABLE synthetic.t (id BIGINT NOT NULL, z VARCHAR, PRIMARY KEY (id)) DISTRIBUTED BY (id)"],
         [{"id": 5, "z": "new", "sys_op": 0}]),
    ]
    expected = [
        [{"id": 1, "a": "x", "b": 10}, {"id": 2, "a": "y", "b": 20}],
        [{"id": 1, "a": "x", "c": None}, {"id": 2, "a": "y2", "c": "c2"}],
        [{"id": 1, "a2": "x", "c": None, "b": None}, {"id": 2, "a2": "y2", "c": "c2", "b": None}],
        [{"id": 5, "z": "new"}],
    ]
    log: list[ChangelogRecord] = []
    ident = layout.snapshot(dm, "t")
    for n, (ddl, changes) in enumerate(story):
        log += [ChangelogRecord(len(log), "t", q) for q in ddl]
        entities = land_changelog(session, layout, dm, n, f"inc-{n}", log)
        columns = entities["t"].columns
        rows = [tuple(c.get(col.name) for col in columns) + (c["sys_op"], 0, i) for i, c in enumerate(changes)]
        frames = {"t": session.createDataFrame(rows, output_spark_schema(columns))} if rows else {}
        land_increment(session, layout, dm, n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, frames)
        apply_snapshots(session, layout, dm, n)
        assert rows_as_of(session, layout, dm, "t", n) == expected[n], f"delta {n}"
        if n == 1:  # the dropped b: kept for the untouched row, NULL for the rewritten one
            assert {r.id: r.b for r in session.table(ident).collect()} == {1: 10, 2: None}
    for n in range(len(story)):  # history intact, each delta under its own DDL
        assert rows_as_of(session, layout, dm, "t", n) == expected[n], f"delta {n}, read again"


def test_a_run_leaves_alone_only_increment_tables_with_no_rows_and_the_same_ddl(lake):
    """`unchanged_increment_tables` (issue 57: a steady delta asks no schema of the tables it left
    alone): after delta 0 landed, delta 1 writes rows to `a`, none to `b` (same DDL), none to `c`
    but adds a column to it, and creates `d`: only `b` is left alone; `c`'s increment table still
    gains the column, `d`'s is made. Without delta 0 in the manifest (a run of delta 0 again, or
    a lake rebuilt), nothing is."""
    from resources.lake.prostore import IncrementDelta, land_increment_tables, unchanged_increment_tables

    session, layout = lake
    dm = "leftalone"

    def create(t: str) -> str:
        return f"CREATE TABLE {dm}.{t} (id BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (id)) DISTRIBUTED BY (id)"

    log = [ChangelogRecord(i, t, create(t)) for i, t in enumerate("abc")]
    entities = land_changelog(session, layout, dm, 0, "inc-0", log)
    land_increment(session, layout, dm, 0, 1_700_000_000_000_000, "inc-0", entities, {})
    log += [ChangelogRecord(3, "c", f"ALTER TABLE {dm}.c ADD COLUMN w INT32"), ChangelogRecord(4, "d", create("d"))]
    entities = land_changelog(session, layout, dm, 1, "inc-1", log)
    rows = session.createDataFrame([(1, "x", 0, 0, 0)], output_spark_schema(entities["a"].columns))
    delta = IncrementDelta(1, 1_700_000_000_000_001, "inc-1", entities, {"a": rows})
    unchanged = unchanged_increment_tables(session, layout, dm, [delta])
    assert unchanged == {"b"}
    assert unchanged_increment_tables(session, layout, dm, [replace(delta, delta_num=0)]) == frozenset()
    stats = land_increment_tables(session, layout, dm, [delta], unchanged)
    assert {s.table: s.rows for s in stats[1]} == {"a": 1, "b": 0, "c": 0, "d": 0}
    assert "w" in session.table(layout.increment(dm, "c")).columns
    assert session.catalog.tableExists(layout.increment(dm, "d"))

"""A range of deltas through the lake layer: the increments of a range in one commit per table,
the snapshot brought through the range in one folded commit per table, exact as of every delta;
a key violation anywhere in the range stops it before any snapshot commit.

Synthetic DataFrames and Arrow tables (no Kafka), real Spark Connect and real Iceberg tables.
"""

from __future__ import annotations

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.lake.landed_mark import lake_landed_through
from resources.lake.layout import LakeLayout
from resources.lake.prostore import IncrementDelta, land_changelogs, land_increments
from resources.lake.prostore_history import history_ident
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of
from resources.spark.iceberg import KeyViolationError, TableNotFoundError
from resources.spark.iceberg_reads import delta_tags, folded_commits, last_applied_delta
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect

pytestmark = pytest.mark.integration

CREATE = "CREATE TABLE dm.t (id BIGINT NOT NULL, a VARCHAR, PRIMARY KEY (id)) DISTRIBUTED BY (id)"
# Per delta: the changes (id, a, sys_op); delta 2 changes nothing.
RANGE = {0: [(1, "x", 0), (2, "y", 0)], 1: [(2, "y1", 0), (3, "z", 0), (3, "z", 0)], 2: [],
         3: [(1, None, 1), (4, "w", 0)]}
EXPECTED = {0: [(1, "x"), (2, "y")], 1: [(1, "x"), (2, "y1"), (3, "z")], 2: [(1, "x"), (2, "y1"), (3, "z")],
            3: [(2, "y1"), (3, "z"), (4, "w")]}


@pytest.fixture()
def lake(spark_remote, tmp_path):
    return connect(spark_remote, CatalogConfig(name="ranges", warehouse=str(tmp_path / "lake"))), LakeLayout("ranges")


def land_range(session, layout, dm, changes_by_delta):
    log = [ChangelogRecord(0, "t", CREATE)]
    entities = land_changelogs(session, layout, dm, [(n, f"inc-{n}", log) for n in changes_by_delta])
    deltas = []
    for n, changes in changes_by_delta.items():
        columns = entities[n]["t"].columns
        rows = [(i, a, op, 0, k) for k, (i, a, op) in enumerate(changes)]
        frames = {"t": session.createDataFrame(rows, output_spark_schema(columns))} if rows else {}
        deltas.append(IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities[n], frames))
    return land_increments(session, layout, dm, deltas)


def commits(session, ident):
    return session.sql(f"SELECT count(*) FROM {ident}.snapshots").first()[0]


def test_a_range_lands_in_one_commit_per_increment_table_and_reads_exact_at_every_delta(lake):
    session, layout = lake
    stats = land_range(session, layout, "dm", RANGE)
    assert {n: [(s.table, s.rows) for s in st] for n, st in stats.items()} == {
        0: [("t", 2)], 1: [("t", 3)], 2: [("t", 0)], 3: [("t", 2)]}
    assert commits(session, layout.increment("dm", "t")) == 1
    assert commits(session, layout.meta("dm", "manifest")) == 1
    assert commits(session, layout.meta("dm", "changelog")) == 1

    applied = apply_snapshots(session, layout, "dm", 3)
    assert [a.delta_num for a in applied] == [0, 1, 3]  # delta 2 left `t` alone: no step of its own
    # The range folds into one commit (each key's last change), tagged with its last delta and
    # recording all four; the states between are read from its parent plus the increments.
    snap = layout.snapshot("dm", "t")
    assert commits(session, snap) == 1
    assert list(delta_tags(session, snap)) == [3]
    assert [c.deltas for c in folded_commits(session, snap)] == [(0, 1, 2, 3)]
    assert last_applied_delta(session, snap) == 3
    for n, want in EXPECTED.items():
        got = [(r["id"], r["a"]) for r in rows_as_of(session, layout, "dm", "t", n)]
        assert got == want, f"as of delta {n}"
    # Re-landing the range and applying again changes nothing.
    land_range(session, layout, "dm", RANGE)
    assert apply_snapshots(session, layout, "dm", 3) == []
    assert [(r["id"], r["a"]) for r in rows_as_of(session, layout, "dm", "t", 3)] == EXPECTED[3]


def test_a_key_violation_inside_a_range_stops_it_before_any_snapshot_commit(lake):
    session, layout = lake
    bad = {**RANGE, 2: [(4, "p", 0), (4, "q", 0)]}  # two different changes of key 4 in delta 2
    land_range(session, layout, "dm2", bad)
    with pytest.raises(KeyViolationError, match=r"delta 2 has NULL keys or several different changes.*id=4 \(2x\)"):
        apply_snapshots(session, layout, "dm2", 3)
    with pytest.raises(TableNotFoundError):  # nothing was written: the snapshot table was never created
        last_applied_delta(session, layout.snapshot("dm2", "t"))


def test_a_range_of_driver_read_arrow_and_executor_frames_lands_each_delta_with_its_counts(lake):
    """A range whose deltas come as Arrow tables (rows the driver read, sent to Spark as one
    relation) and as DataFrames (rows executors read), with a column added inside the range:
    every delta's rows land under its number, counted exactly, in one commit."""
    import pyarrow as pa

    from resources.spark.kafka_reader import output_arrow_schema

    session, layout = lake
    create = ChangelogRecord(0, "t", CREATE)
    alter = ChangelogRecord(1, "t", "ALTER TABLE dm.t ADD COLUMN b INT")
    logs = {0: [create], 1: [create], 2: [create, alter], 3: [create, alter]}
    entities = land_changelogs(session, layout, "dm", [(n, f"inc-{n}", log) for n, log in logs.items()])
    changes = {0: [(1, "x", 0), (2, "y", 0)], 1: [(2, None, 1)], 2: [(3, "z", 7, 0)], 3: [(1, "x1", 8, 0), (3, None, None, 1)]}
    deltas = []
    for n, rows in changes.items():
        columns = entities[n]["t"].columns
        rows = [(*r, 0, k) for k, r in enumerate(rows)]
        if n == 2:  # as the executor path hands it over
            frame = session.createDataFrame(rows, output_spark_schema(columns))
        else:
            schema = output_arrow_schema(columns)
            frame = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)
        deltas.append(IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities[n], {"t": frame}))
    stats = land_increments(session, layout, "dm", deltas)

    assert {n: [(s.table, s.rows, s.upserts, s.deletes) for s in st] for n, st in stats.items()} == {
        0: [("t", 2, 2, 0)], 1: [("t", 1, 0, 1)], 2: [("t", 1, 1, 0)], 3: [("t", 2, 1, 1)]}
    ident = layout.increment("dm", "t")
    assert commits(session, ident) == 1
    got = sorted(tuple(r) for r in session.sql(f"SELECT delta_num, id, a, b, sys_op FROM {ident}").collect())
    assert got == [(0, 1, "x", None, 0), (0, 2, "y", None, 0), (1, 2, None, None, 1), (2, 3, "z", 7, 0),
                   (3, 1, "x1", 8, 0), (3, 3, None, None, 1)]


def test_folds_stop_at_a_column_change_and_stack_on_earlier_folds_exact_at_every_delta(lake):
    """Two range runs: the first folds deltas 0-1, applies 2 (a column added) and 3 on their
    own; the second folds 4-6 on top of them. Every delta reads back exactly, the folded ones
    from their commit's parent plus the increments."""
    session, layout = lake
    create = ChangelogRecord(0, "t", CREATE)
    alter = ChangelogRecord(1, "t", "ALTER TABLE dm.t ADD COLUMN b INT")
    changes = {0: [(1, "x", 0), (2, "y", 0)], 1: [(2, None, 1)], 2: [(3, "z", 7, 0)],
               3: [(1, "x1", 8, 0), (3, None, None, 1)],
               4: [(5, "v", 1, 0)], 5: [(5, "v2", 2, 0), (1, None, None, 1)], 6: [(6, "w", 3, 0)]}
    expected = {0: [(1, "x"), (2, "y")], 1: [(1, "x")], 2: [(1, "x", None), (3, "z", 7)], 3: [(1, "x1", 8)],
                4: [(1, "x1", 8), (5, "v", 1)], 5: [(5, "v2", 2)], 6: [(5, "v2", 2), (6, "w", 3)]}

    def land(deltas):
        logs = {n: [create] if n < 2 else [create, alter] for n in deltas}
        entities = land_changelogs(session, layout, "dm", [(n, f"inc-{n}", log) for n, log in logs.items()])
        land_increments(session, layout, "dm", [
            IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities[n],
                           {"t": session.createDataFrame([(*r, 0, k) for k, r in enumerate(changes[n])],
                                                         output_spark_schema(entities[n]["t"].columns))})
            for n in deltas])

    land([0, 1, 2, 3])
    assert [a.delta_num for a in apply_snapshots(session, layout, "dm", 3)] == [0, 1, 2, 3]
    land([4, 5, 6])
    assert [a.delta_num for a in apply_snapshots(session, layout, "dm", 6)] == [4, 5, 6]

    snap = layout.snapshot("dm", "t")
    assert [c.deltas for c in folded_commits(session, snap)] == [(0, 1), (4, 5, 6)]
    assert commits(session, snap) == 4  # folds 0-1 and 4-6, deltas 2 and 3
    assert list(delta_tags(session, snap)) == [1, 2, 3, 6]
    for n, want in expected.items():
        got = [tuple(r.values()) for r in rows_as_of(session, layout, "dm", "t", n)]
        assert got == want, f"as of delta {n}"


def test_a_fold_whose_changes_cancel_out_still_records_every_delta(lake):
    """A key inserted and deleted inside one range: the fold's MERGE changes no row, and its
    commit still records the range, so every delta is applied once and reads back; delta 2,
    which leaves the table alone, commits nothing to it and is landed all the same."""
    session, layout = lake
    land_range(session, layout, "dm3", {0: [(1, "x", 0)], 1: [(1, None, 1)], 2: []})
    assert [a.delta_num for a in apply_snapshots(session, layout, "dm3", 2)] == [0, 1]
    snap = layout.snapshot("dm3", "t")
    assert last_applied_delta(session, snap) == 1
    assert lake_landed_through(session, layout, "dm3") == 2
    assert [rows_as_of(session, layout, "dm3", "t", n) for n in (0, 1, 2)] == [[{"id": 1, "a": "x"}], [], []]
    assert apply_snapshots(session, layout, "dm3", 2) == []


def test_a_short_key_list_goes_into_the_historys_scan_and_every_delta_reads_exact(lake, monkeypatch):
    """A delta of few changes on a table big enough for the MERGE's key filter: the same filter is
    pushed into the scan of the history's read of the closed versions (Iceberg then skips the
    files whose key range holds none of the keys), and the history it writes is exact."""
    from resources.lake import prostore_history

    session, layout = lake
    seen = []
    real = prostore_history.closed_versions

    def recorded(*args, **kwargs):
        seen.append(kwargs.get("key_filter"))
        closed = real(*args, **kwargs)
        closed.createOrReplaceTempView("closed_now")
        seen.append(session.sql("EXPLAIN SELECT * FROM closed_now").first()[0])
        return closed

    monkeypatch.setattr(prostore_history, "closed_versions", recorded)
    batches = {n: [(i, f"v{i}", 0) for i in range(300 * n + 1, 300 * n + 301)] for n in range(4)}
    batches[4] = [(5, "new5", 0), (7, None, 1), (5000, "ins", 0)]
    for n, changes in batches.items():  # one delta a run: a data file of its own keys each
        land_range(session, layout, "dmk", {n: changes})
        apply_snapshots(session, layout, "dmk", n)
    key_filter, plan = seen[-2:]
    assert key_filter is not None and key_filter.startswith("t.`id` IN (") and "5000L" in key_filter, key_filter
    scan = next(line for line in plan.splitlines() if "BatchScan" in line and "dmk.t" in line)
    assert "5000" in scan, plan  # the list is among the scan's own filters: pushed into Iceberg
    before = {i: f"v{i}" for i in range(1, 1201)}
    after = {**before, 5: "new5", 5000: "ins"}
    del after[7]
    for n, want in ((3, before), (4, after)):
        got = {r["id"]: r["a"] for r in rows_as_of(session, layout, "dmk", "t", n)}
        assert got == want, f"as of delta {n}"
    history = session.table(history_ident(layout, "dmk", "t")).where("delta_num = 4")
    assert sorted(tuple(r) for r in history.select("id", "a", "sys_to", "sys_op").collect()) == [
        (5, "v5", 3, 0), (7, "v7", 3, 1)]


def test_a_write_whose_counts_never_reach_the_client_counts_its_commit_back(lake, monkeypatch):
    """Spark 4.1.1's client waits 100 ms for a write's observed counts (SPARK-54279); a loaded
    server misses that and the client gets none. The landing then counts each delta's rows back
    from the commit instead of failing (it did: KeyError 'rows'), and the counts are exact."""
    from pyspark.sql.connect.observation import Observation

    monkeypatch.setattr(Observation, "get", property(lambda self: {}))
    session, layout = lake
    stats = land_range(session, layout, "dm", RANGE)
    assert {n: [(s.table, s.rows, s.deletes) for s in st] for n, st in stats.items()} == {
        0: [("t", 2, 0)], 1: [("t", 3, 0)], 2: [("t", 0, 0)], 3: [("t", 2, 1)]}

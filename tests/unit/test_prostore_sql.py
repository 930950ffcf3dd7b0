"""Prostore queries rewritten into SQL on a table's current and history tables (the union `H` and
the WHERE per form), run in DuckDB on Arrow tables holding docs/prostore-system-time.md §4's
story: the results must be the digest's table, row for row.

The story (key:value [sys_from, sys_to, sys_op]): d0 insert A:a1 and B:b1; d1 update A->a2; d2
delete B; d3 insert C:c1, update A->a3; d4 delete C; d5 re-insert B:b2. Stored: current A:a3[3],
B:b2[5]; history A:a1[0,0,0], A:a2[1,2,0], B:b1[0,1,1], C:c1[3,3,1]. Delta n closed on
2026-01-(n+1) 00:00. The lake here is a fake (pure logic: what tables exist, their columns); the
SQL is real and DuckDB runs it, once on whole tables and once on the scans' pruning filters, which
must not change any answer.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from resources.lake.history_forms import HistoryNotKeptError
from resources.lake.prostore_sql import DATAMART, STREAM, DeltaNotLandedError, UnknownLakeTableError, rewrite_sql
from resources.lake.sql_engines import duckdb_sql, run_duckdb, spark_sql
from resources.errors import DeltaportError

CURRENT = {"k": ["A", "B"], "v": ["a3", "b2"], "sys_from": [3, 5]}
HISTORY = {"k": ["A", "A", "B", "C"], "v": ["a1", "a2", "b1", "c1"], "sys_from": [0, 1, 0, 3],
           "sys_to": [0, 2, 1, 3], "sys_op": [0, 0, 1, 1], "delta_num": [1, 3, 2, 4]}


class StoryLake:
    """The story's lake: datamart `dm` (table `t`, and `renamed` whose current table calls `v`
    `w`), change stream `cs` (table `t` with a tombstone), mart `dm_marts.m`."""

    def __init__(self, *, prune: bool, history_from: int | None = 0, recorded: int = 5,
                 tags: dict[int, dict] | None = None):
        import duckdb

        self.prune, self.history_from, self.duckdb = prune, history_from, duckdb
        # `recorded`: the table's own newest delta (R; the source landed through 5). `tags`:
        # {delta: the columns of `dm.t`'s snapshot tagged delta_<delta>} (snapshot id = the delta).
        self.recorded_delta, self.tags = recorded, {n: pa.table(rows) for n, rows in (tags or {}).items()}
        renamed = {**CURRENT, "w": CURRENT["v"]}
        del renamed["v"]
        self.data = {
            ("dm", "t"): pa.table({**CURRENT, "sys_from_date": [None, None]}),
            ("dm_history", "t"): pa.table(HISTORY),
            ("dm", "renamed"): pa.table(renamed),
            ("dm_history", "renamed"): pa.table(HISTORY),
            ("cs", "t"): pa.table({"k": ["A", "B", "Z"], "v": ["a3", "b2", "z"], "sys_from": [3, 5, 4],
                                   "_tombstone": [None, False, True], "_order": [1, 2, 3]}),
            ("cs_history", "t"): pa.table(HISTORY),
            ("dm_marts", "m"): pa.table({"n": [10, 20, 21, 50], "delta_num": [1, 2, 2, 5]}),
            # TIME stored as microseconds since midnight: 00:00, 01:48:54.342823, 12:00, 23:59:59.999999
            ("dm", "timed"): pa.table({"k": ["A", "B", "C", "D"], "t": [0, 6534342823, 43_200_000_000, 86_399_999_999],
                                       "sys_from": [0, 0, 0, 0]}),
        }

    def source_kind(self, source):
        return {"dm": DATAMART, "cs": STREAM}.get(source)

    def table_columns(self, namespace, table):
        found = self.data.get((namespace, table))
        return None if found is None else found.column_names

    def ddl_columns(self, datamart, table, delta):
        return {"renamed": ["k", "w"], "timed": ["k", "t"]}.get(table, ["k", "v"])

    def ddl_times(self, datamart, table, delta):
        return ["t"] if table == "timed" else []

    def last_landed(self, namespace, table):
        return 5

    def recorded(self, namespace, table):
        return self.recorded_delta

    def snapshot_as_of(self, namespace, table, delta):
        """The newest tag at or before `delta` (as_of's rule 7; the fake has no folds)."""
        below = [n for n in self.tags if n <= delta]
        return (max(below), self.tags[max(below)].column_names) if below else None

    def history_start(self, source, table):
        return self.history_from

    def close_times(self, source):
        return {n: dt.datetime(2026, 1, 1 + n) for n in range(6)}

    def scan(self, scan):
        """The scan's columns only (the SQL must need no other), filtered when pruning."""
        rows = self.data[scan.namespace, scan.table] if scan.snapshot_id is None else self.tags[scan.snapshot_id]
        if self.prune:
            con = self.duckdb.connect()
            con.register("rows", rows)
            rows = con.sql(f"SELECT * FROM rows WHERE {scan.row_filter}").fetch_arrow_table()
        return rows.select(list(scan.columns)) if scan.columns else rows


def answer(sql: str, **lake) -> list[tuple]:
    results = []
    for prune in (False, True):
        fake = StoryLake(prune=prune, **lake)
        rows = [tuple(r.values()) for r in run_duckdb(rewrite_sql(sql, fake), fake).to_pylist()]
        results.append(sorted(rows, key=lambda row: [(v is not None, v) for v in row]))
    assert results[0] == results[1], "the scans' filters changed the answer"
    return results[0]


@pytest.mark.parametrize("form, rows", [
    ("AS OF DELTA_NUM 0", [("A", "a1"), ("B", "b1")]),
    ("AS OF DELTA_NUM 2", [("A", "a2")]),
    ("AS OF DELTA_NUM 3", [("A", "a3"), ("C", "c1")]),
    ("AS OF DELTA_NUM 4", [("A", "a3")]),
    ("", [("A", "a3"), ("B", "b2")]),
    ("AS OF DELTA_NUM 5", [("A", "a3"), ("B", "b2")]),
    ("AS OF '2026-01-04 00:00:00'", [("A", "a3"), ("C", "c1")]),  # exactly delta 3's close
    ("AS OF '2026-01-04 23:59:59'", [("A", "a3"), ("C", "c1")]),
    ("AS OF '2025-12-31 23:59:59'", []),  # before delta 0 closed: no rows, as Prostore
    ("STARTED IN (1, 3)", [("A", "a2"), ("A", "a3"), ("C", "c1")]),
    ("STARTED IN (0, 0)", [("A", "a1"), ("B", "b1")]),
    ("FINISHED IN (2, 4)", [("B", "b1"), ("C", "c1")]),
    ("FINISHED IN (3, 3)", []),
    ("FINISHED IN (4, 5)", [("C", "c1")]),
    ("STARTED IN (5, 5)", [("B", "b2")]),
])
def test_every_form_answers_the_digests_table(form, rows):
    clause = f"FOR SYSTEM_TIME {form}" if form else ""
    assert answer(f"SELECT k, v FROM dm.t {clause} ORDER BY k, v") == rows
    assert answer(f"SELECT * FROM dm.t {clause} AS x") == rows  # the DDL's columns, no sys_*


def test_a_change_streams_tombstones_are_not_rows():
    assert answer("SELECT k, v FROM cs.t") == [("A", "a3"), ("B", "b2")]
    assert answer("SELECT * FROM cs.t FOR SYSTEM_TIME STARTED IN (3, 5)") == [("A", "a3"), ("B", "b2"), ("C", "c1")]


def test_joins_of_one_table_at_two_system_times_and_aggregates():
    sql = ("SELECT now.k, old.v AS was, now.v AS is_now FROM dm.t now "
           "JOIN dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 1 old ON old.k = now.k")
    assert answer(sql) == [("A", "a2", "a3"), ("B", "b1", "b2")]
    sql = ("SELECT count(*) AS versions, count(DISTINCT k) AS keys "
           "FROM dm.t FOR SYSTEM_TIME STARTED IN (0, 5) WHERE k <> 'Z'")
    assert answer(sql) == [(6, 3)]
    sql = ("WITH gone AS (SELECT k FROM dm.t FOR SYSTEM_TIME FINISHED IN (0, 5)) "
           "SELECT t.k FROM dm.t WHERE t.k IN (SELECT k FROM gone)")  # deleted once, live again
    assert answer(sql) == [("B",)]


def test_time_columns_are_times_in_where_aggregates_and_rows():
    """The lake keeps TIME as microseconds; the query sees a TIME, as in Prostore (issue 56)."""
    assert answer("SELECT k, t FROM dm.timed WHERE t > '12:00:00'") == [("D", dt.time(23, 59, 59, 999999))]
    assert answer("SELECT k FROM dm.timed WHERE t = '12:00:00'") == [("C",)]
    assert answer("SELECT MIN(t), MAX(t) FROM dm.timed WHERE t > '00:00:00'") == [
        (dt.time(1, 48, 54, 342823), dt.time(23, 59, 59, 999999))]
    assert answer("SELECT * FROM dm.timed WHERE k = 'A'") == [("A", dt.time(0, 0))]
    assert "MAKE_TIME(" in spark_sql(rewrite_sql("SELECT t FROM dm.timed", StoryLake(prune=False)), "lake")


def test_a_version_that_never_had_a_column_reads_null():
    # The current table has `w` (renamed from v): closed versions only have `v`.
    assert answer("SELECT k, w FROM dm.renamed FOR SYSTEM_TIME STARTED IN (0, 3)") == [
        ("A", None), ("A", None), ("A", "a3"), ("B", None), ("C", None)]


def test_marts_read_one_partition():
    assert answer("SELECT * FROM dm_marts.m FOR SYSTEM_TIME AS OF DELTA_NUM 2") == [(20,), (21,)]
    assert answer("SELECT * FROM dm_marts.m") == [(50,)]  # the last landed partition
    assert answer("SELECT n FROM dm_marts.m FOR SYSTEM_TIME AS OF '2026-01-02 08:00:00'") == [(10,)]
    sql = ("SELECT m.n, t.v FROM dm_marts.m FOR SYSTEM_TIME AS OF DELTA_NUM 5 m "
           "JOIN dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 5 t ON t.k = 'B'")
    assert answer(sql) == [(50, "b2")]
    with pytest.raises(DeltaportError, match="a mart keeps one state per delta"):
        answer("SELECT * FROM dm_marts.m FOR SYSTEM_TIME STARTED IN (1, 2)")


def test_the_sql_is_the_documented_where_on_h():
    lake = StoryLake(prune=False)
    plan = rewrite_sql("SELECT * FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 2 s", lake)
    text = spark_sql(plan, "lake")
    assert "FROM `lake`.`dm`.`t`" in text and "FROM `lake`.`dm_history`.`t` WHERE delta_num <= 5" in text
    assert "WHERE (sys_from IS NULL OR sys_from <= 2) AND (sys_to IS NULL OR sys_to >= 2)) AS `s`" in text
    assert [(s.namespace, s.row_filter) for s in plan.scans] == [
        ("dm", "sys_from IS NULL OR sys_from <= 2"),
        ("dm_history", "delta_num >= 3 AND (sys_from IS NULL OR sys_from <= 2) AND (sys_to IS NULL OR sys_to >= 2) "
                       "AND delta_num <= 5")]
    finished = duckdb_sql(rewrite_sql("SELECT * FROM dm.t FOR SYSTEM_TIME FINISHED IN (3, 5)", lake))
    assert "sys_to >= 2 AND sys_to <= 4 AND sys_op = 1" in finished and "UNION" not in finished
    current = duckdb_sql(rewrite_sql("SELECT * FROM dm.t", lake))
    assert "sys_" not in current and "__scan_0" in current


def test_scans_read_the_columns_the_query_names():
    lake = StoryLake(prune=False)

    def read(sql):
        return [(s.namespace, s.columns) for s in rewrite_sql(sql, lake).scans]

    assert read("SELECT count(*) FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 5") == [("dm", ("k",))]
    assert read("SELECT count(*) FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 2") == [
        ("dm", ("k", "sys_from")), ("dm_history", ("k", "sys_from", "sys_to", "sys_op", "delta_num"))]
    assert read("SELECT v FROM dm.t FOR SYSTEM_TIME FINISHED IN (1, 2)") == [
        ("dm_history", ("v", "sys_to", "sys_op", "delta_num"))]
    assert read("SELECT k FROM cs.t") == [("cs", ("k", "_tombstone"))]
    assert read("SELECT * FROM dm.t WHERE k = 'A'") == [("dm", ("k", "v"))]
    assert read("SELECT x.* FROM dm.t x") == read("SELECT * FROM dm.t") == [("dm", ("k", "v"))]
    assert read("SELECT a.k FROM dm.t a NATURAL JOIN dm.t b") == [("dm", ("k", "v"))] * 2
    assert answer("SELECT count(*) AS n, count(DISTINCT k) AS keys FROM dm.t FOR SYSTEM_TIME STARTED IN (0, 5)") == [
        (6, 3)]


def test_what_the_lake_cannot_answer_is_an_error():
    with pytest.raises(DeltaNotLandedError, match="delta 6 has not landed.*last landed: 5"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 6")
    with pytest.raises(DeltaNotLandedError, match="delta 9 has not landed"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME STARTED IN (3, 9)")
    with pytest.raises(DeltaportError, match=r"invalid delta range \(4 > 2\)"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME FINISHED IN (4, 2)")
    with pytest.raises(HistoryNotKeptError, match="from delta 3 on"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME STARTED IN (1, 2)", history_from=3)
    assert answer("SELECT * FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 5", history_from=None) == [("A", "a3"), ("B", "b2")]
    with pytest.raises(UnknownLakeTableError, match="neither a source"):
        answer("SELECT * FROM nope.t")
    with pytest.raises(UnknownLakeTableError, match="DATAMART.TABLE"):
        answer("SELECT * FROM t")
    with pytest.raises(UnknownLakeTableError, match="is not a table of the lake"):
        answer("SELECT * FROM dm.missing")
    with pytest.raises(DeltaportError, match="the time must read"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME AS OF 'yesterday'")


def test_a_delta_the_history_does_not_answer_reads_the_newest_tag_at_or_before_it():
    """Issue 57: a delta commits only to the tables it changes. The story's table as kept without
    history, tagged by the deltas that changed it; deltas 2 and 4 (no tag of their own here) read
    the tag before them, a delta from the table's own newest (R) on the table as it is, and a
    delta before its first tag no rows."""
    tags = {1: {"k": ["A", "B"], "v": ["a2", "b1"]}, 3: {"k": ["A", "C"], "v": ["a3", "c1"]},
            5: {"k": ["A", "B"], "v": ["a3", "b2"]}}
    states = {0: [], 1: [("A", "a2"), ("B", "b1")], 2: [("A", "a2"), ("B", "b1")], 3: [("A", "a3"), ("C", "c1")],
              4: [("A", "a3"), ("C", "c1")], 5: [("A", "a3"), ("B", "b2")]}
    for n, rows in states.items():
        assert answer(f"SELECT k, v FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM {n}", history_from=None,
                      tags=tags) == rows, n
    # R = 3 < L = 5: deltas 4 and 5 left the table alone; it is as it is (the current table) from 3 on.
    assert answer("SELECT k, v FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 4", history_from=None, recorded=3,
                  tags={}) == [("A", "a3"), ("B", "b2")]
    fake = StoryLake(prune=False, history_from=None, tags=tags)
    plan = rewrite_sql("SELECT k FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 4", fake)
    assert [(s.namespace, s.table, s.snapshot_id) for s in plan.scans] == [("dm", "t", 3)]
    assert "`lake`.`dm`.`t` VERSION AS OF 3" in spark_sql(plan, "lake")
    with pytest.raises(DeltaNotLandedError, match="delta 6 has not landed"):
        answer("SELECT * FROM dm.t FOR SYSTEM_TIME AS OF DELTA_NUM 6", history_from=None, recorded=3, tags=tags)

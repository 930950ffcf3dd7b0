"""Change-stream tables' key columns read without the whole changelog (resources/lake/stream_keys.py).

Real Spark and Iceberg: deltas landed (changelog, increment, manifest) and applied as the stream
step does, with `current_keys` asked before each snapshot and compared with the whole
changelog's answer (`table_keys`). Then the changelog's old partitions are deleted: the whole
read loses the tables they alone named, `current_keys` still answers for every table, so it did
not read them.
"""

from __future__ import annotations

import pytest

from resources.codecs.cdc import UPSERT, Change
from resources.lake.cdc import apply_cdc_through, changes_frame, increment_columns, infer_columns, \
    land_cdc_increment
from resources.lake.landed_mark import mark_landed
from resources.lake.layout import LakeLayout
from resources.lake.stream_changelog import changelog_entries, land_stream_changelogs, table_keys
from resources.lake.stream_keys import current_keys, recorded_keys
from resources.spark.iceberg_reads import last_applied_delta
from resources.spark.session_properties import own_property

pytestmark = pytest.mark.integration

LAYOUT = LakeLayout()


@pytest.fixture
def source(lake_ns: str) -> str:
    return lake_ns.split(".", 1)[1]


def row(table: str, key: tuple[str, ...], order: int, **values) -> Change:
    return Change(source="test", namespace=None, table=table, operation=UPSERT, key_columns=key, values=values,
                  order_key=(order,), captured=None, event_id=None, is_backfill=False)


def land_delta(spark, source: str, n: int, changes: list[Change]) -> dict[str, tuple[str, ...]]:
    """Land delta n as the stream step does (changelog, increment tables, manifest), then apply it
    with the keys `current_keys` gives; returns those keys after checking them against the whole
    changelog's."""
    land_stream_changelogs(spark, LAYOUT, source, {n: changelog_entries([(0, n, changes)])})
    frames = {}
    for table in sorted({c.table for c in changes}):
        chs = [c for c in changes if c.table == table]
        frames[table] = changes_frame(spark, chs, infer_columns(chs, increment_columns(spark, LAYOUT, source, table)))
    land_cdc_increment(spark, LAYOUT, source, n, frames)
    keys, progress = current_keys(spark, LAYOUT, source, n)
    assert keys == table_keys(spark, LAYOUT, source, n), n
    apply_cdc_through(spark, LAYOUT, source, n, keys, progress=progress)
    mark_landed(spark, LAYOUT, source, n)  # as the step does: a table the delta left alone is at it
    return keys


def test_current_keys_read_the_changelog_from_the_lowest_last_applied_delta_on(spark, source):
    whole_row = ("id", "x")  # a table keyed by the whole row (DataWorks without a primary key)
    land_delta(spark, source, 0, [row("things", ("id",), 1, id=1, x="a"), row("others", ("id",), 2, id=1, x="o")])
    land_delta(spark, source, 1, [row("things", ("id",), 3, id=2, x="b")])
    keys = land_delta(spark, source, 2, [row("things", ("id",), 4, id=3, x="c"), row("rows", whole_row, 5, id=1, x="r")])
    assert keys == {"others": ("id",), "rows": whole_row, "things": ("id",)}
    # `others` last changed in delta 0: its key is the one its commit recorded.
    assert recorded_keys(spark, [LAYOUT.snapshot(source, "others")]) == {LAYOUT.snapshot(source, "others"): ("id",)}
    # Re-landing the past (a table is already past it) reads the whole changelog, as it must.
    for n in range(3):
        assert current_keys(spark, LAYOUT, source, n)[0] == table_keys(spark, LAYOUT, source, n), n

    # Every table is at delta 2 now: deltas before it are never read again.
    spark.sql(f"DELETE FROM {LAYOUT.meta(source, 'changelog')} WHERE delta_num < 2")
    land_stream_changelogs(spark, LAYOUT, source, {3: changelog_entries([(0, 3, [row("things", ("id",), 6, id=4, x="d")])])})
    assert "others" not in table_keys(spark, LAYOUT, source, 3)  # the whole read lost it
    keys, progress = current_keys(spark, LAYOUT, source, 3)
    assert keys == {"others": ("id",), "rows": whole_row, "things": ("id",)}
    assert progress == {LAYOUT.snapshot(source, t): 2 for t in ("others", "rows", "things")}


def test_a_delta_of_only_duplicate_changes_records_its_key_only_when_it_changed(spark, source):
    """A delta whose changes of a table are all copies of applied ones leaves its state as it
    was: with the key the table's newest commit records, nothing is written (issue 57: a delta
    commits only to what it changes); with another key, its empty commit records it, as a
    MERGE's does (`current_keys` reads it back)."""
    first = row("things", ("id",), 1, id=1, x="a")
    land_delta(spark, source, 0, [first, row("others", ("id",), 2, id=1, x="o")])
    land_delta(spark, source, 1, [row("others", ("id",), 3, id=2, x="p")])
    ident = LAYOUT.snapshot(source, "things")
    commits = spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0]
    land_delta(spark, source, 2, [first])  # delivered again (at least once)
    assert last_applied_delta(spark, ident) == 0
    assert spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0] == commits
    assert [r["x"] for r in spark.table(ident).collect()] == ["a"]
    assert recorded_keys(spark, [ident]) == {ident: ("id",)}
    both = ("id", "x")
    assert land_delta(spark, source, 3, [row("things", both, 1, id=1, x="a")])["things"] == both  # a new key
    assert last_applied_delta(spark, ident) == 3
    assert [r["x"] for r in spark.table(ident).collect()] == ["a"]
    newest = spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()[0][0]
    assert newest["deltaport.delta"] == "3" and newest[own_property("deltaport.keys", ident)] == '["id", "x"]'
    assert "deltaport.keys" not in newest  # the table's own key only (MERGEs of other tables run beside)
    assert recorded_keys(spark, [ident]) == {ident: both}

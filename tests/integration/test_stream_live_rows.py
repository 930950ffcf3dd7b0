"""A change stream's live rows without a scan: each snapshot commit records its tombstones.

A stream table's rows include its tombstones (a deleted key's row, kept so that a late change
cannot bring it back), so the commit summary's row count is not its live rows. Each MERGE now
records the table's tombstones after it (`deltaport.tombstones`): the ones before, plus the
keys it leaves deleted, minus the keys whose stored row was one. Here a table goes through
deletes, keys deleted again and brought back, late changes, a delta of duplicates only, and a
range of two deltas folded into one MERGE; after each, the count the commit gives equals a scan
of the table, and so does what the next run reads back from the summary (`writer_progress`).
A table whose commits do not record them (made by an older deltaport) has them counted once.

Hand-made changes (no Kafka), real Spark Connect and real Iceberg tables.
"""

from __future__ import annotations

import pytest

from resources.codecs.cdc import DELETE, UPSERT, Change
from resources.lake.cdc import apply_cdc_through, changes_frame, land_cdc_increment
from resources.lake.layout import LakeLayout
from resources.spark.iceberg_reads import TOMBSTONES_PROPERTY, writer_progress
from resources.spark.session_properties import own_property

pytestmark = pytest.mark.integration

LAYOUT = LakeLayout()
T, KEY = "things", ("id",)


def change(op: str, key, order: int, a: str | None = "v") -> Change:
    return Change(source="test", namespace="ns", table=T, operation=op, key_columns=KEY,
                  values={"id": key, "a": a} if op == UPSERT else {"id": key}, order_key=(order,))


def columns():
    from pyspark.sql import types as Ty

    return [("id", Ty.LongType()), ("a", Ty.StringType())]


def scanned(spark, ident: str) -> tuple[int, int]:
    """(live rows, tombstones) of the table, by a scan."""
    rows = spark.table(ident).select("_tombstone").collect()
    return sum(1 for r in rows if not r[0]), sum(1 for r in rows if r[0])


def land(spark, src: str, n: int, changes: list[Change]) -> None:
    land_cdc_increment(spark, LAYOUT, src, n, {T: changes_frame(spark, changes, columns())})


def read_back(spark, ident: str) -> tuple[int, int]:
    """(rows, tombstones) as the next run reads them: the summaries, no scan."""
    sizes, tombstones = {}, {}
    writer_progress(spark, [ident], sizes=sizes, tombstones=tombstones)
    return sizes[ident], tombstones[ident]


def test_each_commit_counts_live_rows_and_tombstones_as_a_scan_does(spark, lake_ns):
    src = lake_ns.split(".", 1)[1]
    ident = LAYOUT.snapshot(src, T)
    steps = {
        0: [change(UPSERT, k, k) for k in range(1, 21)] + [change(UPSERT, None, 0, "null key")],
        1: [change(DELETE, k, 100 + k) for k in range(1, 6)] + [change(UPSERT, k, 100 + k) for k in range(21, 26)]
           + [change(DELETE, 40, 140)],  # a key never seen, deleted: a tombstone from nothing
        2: [change(UPSERT, 1, 201, "back"), change(UPSERT, 2, 202, "back"),  # tombstones live again
            change(DELETE, 6, 206), change(DELETE, 6, 206),  # a duplicate
            change(UPSERT, 7, 3, "late"),  # older than the stored row: dropped
            change(DELETE, 3, 203), change(DELETE, None, 204)],  # a tombstone deleted again; NULL key
    }
    for n, changes in steps.items():
        land(spark, src, n, changes)
        (applied,) = apply_cdc_through(spark, LAYOUT, src, n, {T: KEY})
        live, tombs = scanned(spark, ident)
        assert applied.live_rows == live, n
        assert read_back(spark, ident) == (live + tombs, tombs), n
    assert scanned(spark, ident) == (21 - 5 + 5 + 2 - 1 - 1, 5 + 1 - 2 + 1 + 1)  # the NULL key is a key

    # Only duplicates and late changes: an empty commit, its count the same as before.
    land(spark, src, 3, [change(UPSERT, 8, 4, "late"), change(DELETE, 6, 206)])
    (applied,) = apply_cdc_through(spark, LAYOUT, src, 3, {T: KEY})
    assert applied.events == 0
    assert read_back(spark, ident)[1] == scanned(spark, ident)[1]

    # Two deltas folded into one MERGE: a key deleted then upserted, one upserted then deleted,
    # a tombstone upserted then deleted again.
    land(spark, src, 4, [change(DELETE, 10, 410), change(UPSERT, 11, 411, "x"), change(UPSERT, 4, 404, "y")])
    land(spark, src, 5, [change(UPSERT, 10, 510, "z"), change(DELETE, 11, 511), change(DELETE, 4, 504),
                         change(UPSERT, 50, 550, "new")])
    applied = apply_cdc_through(spark, LAYOUT, src, 5, {T: KEY})
    live, tombs = scanned(spark, ident)
    assert applied[-1].live_rows == live
    assert read_back(spark, ident) == (live + tombs, tombs)


def test_a_table_whose_commits_do_not_record_tombstones_has_them_counted_once(spark, lake_ns):
    src = lake_ns.split(".", 1)[1]
    ident = LAYOUT.snapshot(src, T)
    land(spark, src, 0, [change(UPSERT, k, k) for k in range(1, 11)])
    apply_cdc_through(spark, LAYOUT, src, 0, {T: KEY})
    land(spark, src, 1, [change(DELETE, k, 100 + k) for k in range(1, 4)])
    apply_cdc_through(spark, LAYOUT, src, 1, {T: KEY})
    # As an older deltaport left it: a newest delta commit without the count (an empty commit of
    # delta 2 that records no tombstones).
    spark.conf.set("spark.sql.iceberg.snapshot-property.deltaport.delta", "2")
    try:
        spark.sql(f"INSERT INTO {ident} SELECT * FROM {ident} WHERE false")
    finally:
        spark.conf.unset("spark.sql.iceberg.snapshot-property.deltaport.delta")
    sizes, tombstones = {}, {}
    progress = writer_progress(spark, [ident], sizes=sizes, tombstones=tombstones)
    assert progress[ident] == 2 and ident not in tombstones
    land(spark, src, 3, [change(UPSERT, 2, 302, "back"), change(DELETE, 9, 309)])
    (applied,) = apply_cdc_through(spark, LAYOUT, src, 3, {T: KEY}, progress=progress, tombstones=tombstones)
    assert applied.live_rows == scanned(spark, ident)[0] == 10 - 3 + 1 - 1
    summary = spark.table(f"{ident}.snapshots").orderBy("committed_at", ascending=False).first()["summary"]
    assert summary[own_property(TOMBSTONES_PROPERTY, ident)] == "3"

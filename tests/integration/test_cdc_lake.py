"""Qlik, DataWorks and Datastream changes in real Iceberg tables (resources/lake/cdc.py).

Each emulator story is decoded in arrival order, cut into consecutive chunks that play the part
of deltas, and every chunk is landed (increment + manifest) and applied (one snapshot commit per
table). The snapshots, read back by tag, must equal the story's truth: Qlik and DataWorks after
every chunk (chunks end at transaction ends), Datastream at the end (its arrival order is not
the source order; its backfill reads are shuffled further here). Focused cases build changes by
hand: duplicates, late changes, partial captures, tombstones, re-applying a delta.
Real Spark and Iceberg (the session `spark` fixture); each test has its own source namespace.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change
from resources.lake.cdc import (
    CdcTypeError,
    UnappliedDeltasError,
    apply_cdc_snapshot,
    apply_cdc_through,
    cdc_landed_deltas,
    cdc_rows_as_of,
    changes_frame,
    increment_columns,
    infer_columns,
    land_cdc_increment,
    order_key_text,
)
from resources.lake.layout import LakeLayout
from resources.lake.prostore import landed_deltas
from resources.lake.source_tables import MissingDeltasError
from resources.spark.iceberg_reads import last_applied_delta

pytestmark = pytest.mark.integration

LAYOUT = LakeLayout()


@pytest.fixture
def source(lake_ns: str) -> str:
    return lake_ns.split(".", 1)[1]


def land(spark, source: str, n: int, changes: dict[str, list[Change]]) -> None:
    """Land chunk `n` ({table: changes}). Column types: the lake's, then the source's, then
    the values' (`infer_columns`)."""
    frames = {}
    for table, chs in changes.items():
        columns = infer_columns(chs, increment_columns(spark, LAYOUT, source, table))
        frames[table] = changes_frame(spark, chs, columns)
    land_cdc_increment(spark, LAYOUT, source, n, frames)


def land_and_apply(spark, source: str, n: int, changes: dict[str, list[Change]], keys: dict[str, tuple]):
    """Land chunk `n` (tables without changes get none) and apply it to every table of `keys`."""
    land(spark, source, n, changes)
    applied = apply_cdc_through(spark, LAYOUT, source, n, keys)
    assert [(a.delta_num, a.skipped) for a in applied] == [(n, False)] * len(keys)
    return applied


def canonical(rows, columns=None) -> list[dict]:
    """Rows with every column of `columns` (missing ones None), in one order."""
    names = list(columns) if columns is not None else sorted({c for r in rows for c in r})
    out = [{c: r.get(c) for c in names} for r in rows]
    return sorted(out, key=lambda r: [(v is not None, repr(v)) for v in r.values()])


def assert_table_equals(spark, source, table, n, truth_rows, label):
    got = cdc_rows_as_of(spark, LAYOUT, source, table, n)
    columns = sorted({c for r in got for c in r} | {c for r in truth_rows for c in r})
    assert canonical(got, columns) == canonical(truth_rows, columns), f"{label}: {table} as of delta {n}"


def decoded(messages, decode):
    """[(message index, record)] of every message, in arrival order."""
    return [(i, rec) for i, m in enumerate(messages) for rec in decode(m.key, m.value)]


def changes_by_table(records, name=lambda ch: ch.table) -> dict[str, list[Change]]:
    out: dict[str, list[Change]] = {}
    for rec in records:
        if isinstance(rec, Change):
            out.setdefault(name(rec), []).append(rec)
    return out


def transaction_cuts(pairs, is_end, parts: int) -> list[int]:
    """Indexes into `pairs` ([(message index, record)]) right after a transaction's end that is
    the newest record so far (not a re-delivered copy) and the last record of its message (a
    Qlik UPDATE gives a before-image and the upsert, both marked last in transaction), spread
    so that there are `parts` chunks."""
    newest, ends = None, []
    for j, (i, rec) in enumerate(pairs):
        key = getattr(rec, "order_key", None)
        if key is not None and (newest is None or key >= newest):
            newest = key
            if is_end(rec) and (j + 1 == len(pairs) or pairs[j + 1][0] != i):
                ends.append(j + 1)
    return [ends[len(ends) * p // parts] for p in range(1, parts)]


# ---- the emulators' stories ------------------------------------------------------------------


def test_qlik_story_equals_the_truth_after_every_delta(spark, source):
    from resources.codecs.qlik import QlikDecoder
    from resources.emulator.qlik import QlikConfig, build_qlik_story

    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    assert {"uncaptured", "duplicate", "rollback", "ddl"} <= set(story.injected)
    decoder = QlikDecoder()
    pairs = decoded(story.messages, decoder.decode)
    records = [rec for _, rec in pairs]
    assert any(isinstance(r, Change) and r.operation == BEFORE_IMAGE for r in records)
    cuts = transaction_cuts(pairs, lambda r: isinstance(r, Change) and r.last_in_transaction, 3)
    keys = {t: decoder.table(story.config.schema, t).key_columns for t in story.tables}
    bounds = [0, *cuts, len(records)]
    for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        chunk = records[lo:hi]
        land_and_apply(spark, source, n, changes_by_table(chunk), keys)
        bound = max(r.order_key for r in records[:hi] if isinstance(r, Change))
        truth = story.state_after(bound)
        for table in story.tables:
            assert_table_equals(spark, source, table, n, list(truth[table].values()), "qlik")
    # The story had UPDATEs with columnMask bits 0 (uncaptured columns, not NULLs): the states
    # above being equal to the truth shows those columns kept their stored values.
    partial = [r for r in records if isinstance(r, Change) and r.operation == UPSERT
               and r.captured is not None and set(r.captured) != set(r.column_types)]
    assert partial
    landed = cdc_landed_deltas(spark, LAYOUT, source)
    assert sorted(landed) == [0, 1, 2] and sorted(landed_deltas(spark, LAYOUT, source)) == [0, 1, 2]


def test_dataworks_story_equals_the_truth_after_every_delta(spark, source):
    from resources.codecs.cdc import TransactionMark
    from resources.codecs.dataworks import decode_dataworks
    from resources.emulator.dataworks import AUDIT, ORDERS, DataWorksConfig, build_dataworks_story

    story = build_dataworks_story(DataWorksConfig(seed=5, transactions=30, failover_rate=0.3))
    assert story.injected.get("duplicate")
    pairs = decoded(story.messages, decode_dataworks)
    records = [rec for _, rec in pairs]
    cuts = transaction_cuts(pairs, lambda r: isinstance(r, TransactionMark) and r.kind == "end", 3)
    by_table = changes_by_table(records)
    keys = {t: by_table[t][0].key_columns for t in (ORDERS, AUDIT)}
    assert len(keys[AUDIT]) > 1  # no primary key: the whole row is the key (NULLs in it too)
    bounds = [0, *cuts, len(records)]
    for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        land_and_apply(spark, source, n, changes_by_table(records[lo:hi]), keys)
        bound = max(r.order_key for r in records[:hi] if getattr(r, "order_key", None) is not None)
        truth = story.state_after(bound)
        for table in (ORDERS, AUDIT):
            assert_table_equals(spark, source, table, n, list(truth[table].values()), "dataworks")


def test_datastream_story_converges_despite_late_and_shuffled_changes(spark, source):
    from resources.codecs.datastream import decode_datastream
    from resources.emulator.datastream import DatastreamConfig, build_datastream_story

    story = build_datastream_story(DatastreamConfig(seed=3, steps=150, duplicate_rate=0.1))
    changes = [rec for _, rec in decoded(story.messages, decode_datastream)]
    # Backfill reads may arrive in any order: move each to a random place in the stream. And a
    # lagging partition holds back some CDC events of the first third until the last third.
    rng = random.Random(3)
    shuffled = [c for c in changes if not c.is_backfill]
    held = set(rng.sample(range(len(shuffled) // 3), 8))
    late_cdc = [c for i, c in enumerate(shuffled) if i in held]
    shuffled = [c for i, c in enumerate(shuffled) if i not in held]
    for c in late_cdc:
        shuffled.insert(rng.randrange(len(shuffled) * 3 // 4, len(shuffled) + 1), c)
    for c in (c for c in changes if c.is_backfill):
        shuffled.insert(rng.randrange(len(shuffled) + 1), c)

    def name(ch):
        return f"{ch.namespace}_{ch.table}"

    parts = 3
    chunks = [shuffled[len(shuffled) * p // parts: len(shuffled) * (p + 1) // parts] for p in range(parts)]
    # The cut leaves older changes of a key after newer ones in an earlier delta: backfill reads,
    # re-delivered duplicates and held-back CDC events.
    newest: dict[tuple, tuple] = {}
    seen: set[str] = set()
    late = {"backfill": 0, "duplicate": 0, "cdc": 0}
    for chunk in chunks:
        for ch in chunk:
            k = (name(ch), tuple(ch.values[c] for c in ch.key_columns))
            if k in newest and ch.order_key < newest[k]:
                late["backfill" if ch.is_backfill else "duplicate" if ch.event_id in seen else "cdc"] += 1
        for ch in chunk:
            k = (name(ch), tuple(ch.values[c] for c in ch.key_columns))
            newest[k] = max(newest.get(k, ch.order_key), ch.order_key)
            seen.add(ch.event_id)
    assert all(late.values()), late

    by_table = changes_by_table(shuffled, name)
    keys = {t: chs[0].key_columns for t, chs in by_table.items()}
    for n, chunk in enumerate(chunks):
        land(spark, source, n, changes_by_table(chunk, name))
    # Every delta landed, none applied: one call catches every table up, delta by delta.
    applied = apply_cdc_through(spark, LAYOUT, source, parts - 1, keys)
    assert [(a.table, a.delta_num) for a in applied] == [(t, n) for t in sorted(keys) for n in range(parts)]
    truth = story.state_at(story.last_event_time_us)
    for qualified, rows in truth.items():
        assert_table_equals(spark, source, qualified.replace(".", "_"), parts - 1, list(rows.values()), "datastream")


# ---- focused cases ---------------------------------------------------------------------------

T = "things"
KEY = ("id",)


def change(op, key, order, *, captured=None, event_id=None, backfill=False, **values) -> Change:
    return Change(source="test", namespace="ns", table=T, operation=op, key_columns=KEY, values={"id": key, **values},
                  order_key=order, captured=None if captured is None else frozenset(captured | {"id"}),
                  event_id=event_id, is_backfill=backfill)


def full(key, order, a, b, c, **kw) -> Change:
    return change(UPSERT, key, order, a=a, b=b, c=c, **kw)



def focused_deltas() -> list[tuple[list[Change], dict]]:
    """Three deltas of hand-made changes and the state after each: duplicates, late changes
    (within a delta and across deltas), partial captures, deletes, tombstones, a revival."""
    d0 = [
        full(1, (1, 0), "dup", 1, 1.0, event_id="e1"), full(1, (1, 0), "dup", 1, 1.0, event_id="e1"),  # at least once
        full(2, (10,), "new", 2, 2.0),
        full(3, (20,), "B", 3, 3.0), full(3, (15,), "A", 33, 33.0),  # arrives after, happened before
        full(4, (1, 4), "keep", 4, 4.0),
        change(DELETE, 6, (30,)),  # a key deleted before any other change of it is seen
        full(7, (2,), "gone soon", 7, 7.0),
        full(8, (3,), "reset", 8, 8.0),
        change(BEFORE_IMAGE, 9, (5,), a="an old image"),
    ]
    s0 = {1: ("dup", 1, 1.0), 2: ("new", 2, 2.0), 3: ("B", 3, 3.0), 4: ("keep", 4, 4.0),
          7: ("gone soon", 7, 7.0), 8: ("reset", 8, 8.0)}
    d1 = [
        full(1, (1, 0), "dup", 1, 1.0, event_id="e1"),  # re-delivered a delta later
        full(2, (5,), "old", 22, 22.0),  # late: older than the stored change
        change(UPSERT, 4, (40,), captured={"b"}, b=None),  # b captured as NULL; a, c not captured
        change(UPSERT, 5, (41,), captured={"a"}, a="only a"),  # a partial change of a new key
        change(UPSERT, 6, (0,), backfill=True, a="resurrected?", b=6, c=6.0),  # older than its tombstone
        change(DELETE, 7, (42,)),
        change(DELETE, 8, (43,)), change(UPSERT, 8, (44,), captured={"a"}, a="again"),  # delete, then partial
    ]
    s1 = {1: ("dup", 1, 1.0), 2: ("new", 2, 2.0), 3: ("B", 3, 3.0), 4: ("keep", None, 4.0),
          5: ("only a", None, None), 8: ("again", None, None)}
    d2 = [
        change(UPSERT, 7, (2, 5), backfill=True, a="back?", b=0, c=0.0),  # older than 7's delete
        change(UPSERT, 4, (45,), captured={"c"}, c=None),
        full(6, (46,), "born again", 6, 6.0),  # a newer change does bring a deleted key back
        change(UPSERT, 5, (40, 5), captured={"b"}, b=55),  # older than 5's partial change of delta 1
    ]
    s2 = {1: ("dup", 1, 1.0), 2: ("new", 2, 2.0), 3: ("B", 3, 3.0), 4: ("keep", None, None),
          5: ("only a", None, None), 6: ("born again", 6, 6.0), 8: ("again", None, None)}
    return [(d0, s0), (d1, s1), (d2, s2)]


def spark_columns():
    from pyspark.sql import types as Ty

    return [("id", Ty.LongType()), ("a", Ty.StringType()), ("b", Ty.LongType()), ("c", Ty.DoubleType())]


def test_a_range_folded_into_one_commit_reads_back_every_delta_as_applied_one_by_one(spark, source):
    """The focused deltas landed first, then applied at once (a range run): one snapshot commit
    recording deltas 0-2, tagged delta_2, and every delta reads back as applying them one after
    the other left it (the test above), late changes across deltas and re-deliveries included."""
    from resources.lake.cdc import cdc_recorded_deltas
    from resources.spark.iceberg_reads import delta_tags, folded_commits

    columns = spark_columns()
    deltas = focused_deltas()
    for n, (changes, _) in enumerate(deltas):
        land_cdc_increment(spark, LAYOUT, source, n, {T: changes_frame(spark, changes, columns)})
    applied = apply_cdc_through(spark, LAYOUT, source, 2, {T: KEY})
    assert [(a.delta_num, a.skipped) for a in applied] == [(0, False), (1, False), (2, False)]
    ident = LAYOUT.snapshot(source, T)
    assert spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0] == 1
    assert list(delta_tags(spark, ident)) == [2] and cdc_recorded_deltas(spark, ident) == {0, 1, 2}
    assert [c.deltas for c in folded_commits(spark, ident)] == [(0, 1, 2)]
    for n, (_, state) in enumerate(deltas):
        got = {r["id"]: (r["a"], r["b"], r["c"]) for r in cdc_rows_as_of(spark, LAYOUT, source, T, n)}
        assert got == state, f"as of delta {n}"
    # A fold on top of it (deltas 3-4: a delete and a revival of one key, a partial change of a
    # tombstone's key) reads back from delta 2's tag; applying again changes nothing.
    more = [[change(DELETE, 1, (60,)), change(UPSERT, 7, (61,), captured={"a"}, a="seven")],
            [full(1, (62,), "one", 10, 10.0), change(UPSERT, 8, (8,), captured={"b"}, b=88)]]
    for n, changes in enumerate(more, start=3):
        land_cdc_increment(spark, LAYOUT, source, n, {T: changes_frame(spark, changes, columns)})
    apply_cdc_through(spark, LAYOUT, source, 4, {T: KEY})
    s2 = deltas[2][1]
    want = {3: {**{k: v for k, v in s2.items() if k != 1}, 7: ("seven", None, None)},
            4: {**s2, 1: ("one", 10, 10.0), 7: ("seven", None, None)}}
    for n, state in want.items():
        got = {r["id"]: (r["a"], r["b"], r["c"]) for r in cdc_rows_as_of(spark, LAYOUT, source, T, n)}
        assert got == state, f"as of delta {n}"
    assert [c.deltas for c in folded_commits(spark, ident)] == [(0, 1, 2), (3, 4)]
    assert all(a.skipped for a in apply_cdc_through(spark, LAYOUT, source, 4, {T: KEY}))


def test_duplicates_late_changes_partial_captures_and_tombstones(spark, source):
    columns = spark_columns()

    def run(n, changes):
        land_cdc_increment(spark, LAYOUT, source, n, {T: changes_frame(spark, changes, columns)})
        return apply_cdc_snapshot(spark, LAYOUT, source, n, T, KEY, columns)

    def rows(n):
        return {r["id"]: (r["a"], r["b"], r["c"]) for r in cdc_rows_as_of(spark, LAYOUT, source, T, n)}

    (d0, s0), (d1, s1), (d2, s2) = focused_deltas()
    applied = run(0, d0)
    assert (applied.events, applied.upserts, applied.deletes) == (8, 6, 1), applied  # e1 once, no before-image
    assert rows(0) == s0
    applied = run(1, d1)
    assert (applied.events, applied.upserts, applied.deletes) == (5, 3, 1), applied  # 1, 2, 6 dropped
    assert rows(1) == s1
    run(2, d2)
    assert rows(2) == s2
    assert rows(0)[4] == ("keep", 4, 4.0)  # time travel by tag still sees delta 0

    # The snapshot keeps tombstones with their order: 7 is one, with the order of its delete.
    ident = LAYOUT.snapshot(source, T)
    tomb = spark.table(ident).where("id = 7").collect()[0]
    assert tomb["_tombstone"] and tomb["_order"] == order_key_text((42,)) and tomb["a"] is None

    # Re-applying a delta changes nothing: skipped, no new commit, summary says delta 2.
    commits = spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0]
    again = apply_cdc_snapshot(spark, LAYOUT, source, 2, T, KEY, columns)
    assert again.skipped and apply_cdc_snapshot(spark, LAYOUT, source, 1, T, KEY, columns).skipped
    assert spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0] == commits
    assert last_applied_delta(spark, ident) == 2
    # A delta not landed, or one after a gap, is refused before anything is written.
    with pytest.raises(MissingDeltasError, match=r"^change stream '.*delta\(s\) 3 "):
        apply_cdc_snapshot(spark, LAYOUT, source, 3, T, KEY, columns)
    land_cdc_increment(spark, LAYOUT, source, 4, {T: changes_frame(spark, [full(9, (50,), "x", 9, 9.0)], columns)})
    with pytest.raises(MissingDeltasError, match=r"delta\(s\) 3 "):
        apply_cdc_snapshot(spark, LAYOUT, source, 4, T, KEY, columns)
    with pytest.raises(MissingDeltasError, match=r"delta\(s\) 3 "):
        apply_cdc_through(spark, LAYOUT, source, 4, {T: KEY})
    land_cdc_increment(spark, LAYOUT, source, 3, {T: changes_frame(spark, [full(9, (49,), "y", 0, 0.0)], columns)})
    with pytest.raises(UnappliedDeltasError, match=r"before delta\(s\) 3;"):
        apply_cdc_snapshot(spark, LAYOUT, source, 4, T, KEY, columns)
    assert spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0] == commits


def test_values_of_every_decoder_type_round_trip(spark, source):
    values = {"id": 1, "big": 2**70, "neg": -(2**40), "f": 0.1, "flag": True, "s": "Zürich 東京 'q'",
              "raw": b"\x00\xffbytes", "amount": Decimal("-12345.67"), "at": dt.datetime(2024, 3, 1, 9, 0, 0, 123456),
              "day": dt.date(1999, 12, 31), "tod": dt.time(23, 59, 58, 999999), "nothing": None}
    first = Change("test", None, "typed", UPSERT, ("id",), values, (1,), column_types={"amount": "NUMERIC(12,2)"})
    second = Change("test", None, "typed", UPSERT, ("id",), {**values, "id": 2, "f": 3, "amount": 5}, (2,))
    columns = dict(infer_columns([first, second]))
    assert {n: t.simpleString() for n, t in columns.items()} == {
        "id": "bigint", "big": "decimal(22,0)", "neg": "bigint", "f": "double", "flag": "boolean", "s": "string",
        "raw": "binary", "amount": "decimal(12,2)", "at": "timestamp_ntz", "day": "date", "tod": "bigint",
        "nothing": "string"}
    # The lake's type, then the source's, then the values': only if every value fits.
    from pyspark.sql import types as Ty

    def typed(source_name, values, column_types=None, known=()):
        ch = Change(source_name, None, "x", UPSERT, ("k",), values, (1,), column_types=column_types or {})
        return [t.simpleString() for _, t in infer_columns([ch], known)]

    assert typed("dataworks", {"n": None, "d": None}, {"n": "LONG", "d": "DATE"}) == ["bigint", "timestamp_ntz"]
    assert typed("qlik", {"b": "QUJD"}, {"b": "BYTES"}) == ["string"]  # Qlik JSON keeps bytes as text
    assert typed("datastream", {"a": 5, "b": None}, {"a": "decimal(10,2)"}, [("b", Ty.DateType())]) == [
        "date", "decimal(10,2)"]
    assert typed("test", {"a": 1.5}, known=[("a", Ty.LongType())]) == ["double"]  # does not fit: the values'
    with pytest.raises(CdcTypeError, match="mixes values"):
        infer_columns([first, Change("test", None, "typed", UPSERT, ("id",), {"id": "one"}, (3,))])

    land_and_apply(spark, source, 0, {"typed": [first, second]}, {"typed": ("id",)})
    got = cdc_rows_as_of(spark, LAYOUT, source, "typed", 0)
    micros = ((23 * 60 + 59) * 60 + 58) * 1_000_000 + 999999
    assert got == [{**values, "big": Decimal(2**70), "tod": micros},
                   {**values, "id": 2, "big": Decimal(2**70), "tod": micros, "f": 3.0, "amount": Decimal("5.00")}]


def test_the_snapshot_check_counts_live_rows_and_finds_a_key_held_twice(spark, source):
    """platform_assets/streams/checks.py: live rows per table (tombstones left out) and keys held
    by more than one row, in one job for every table."""
    from platform_assets.streams.checks import snapshot_checks

    columns = spark_columns()
    (d0, s0), _, _ = focused_deltas()
    land_cdc_increment(spark, LAYOUT, source, 0, {T: changes_frame(spark, d0, columns)})
    apply_cdc_through(spark, LAYOUT, source, 0, {T: KEY})
    counts, [result] = snapshot_checks(spark, LAYOUT, source, 0, {T: KEY, "never_landed": KEY})
    assert counts == {T: len(s0)} and result.passed  # key 6's tombstone is not a live row
    ident = LAYOUT.snapshot(source, T)
    spark.sql(f"INSERT INTO {ident} SELECT * FROM {ident} WHERE id = 1")  # a second row of key 1
    spark.sql(f"ALTER TABLE {ident} CREATE OR REPLACE TAG `delta_0`")
    counts, [result] = snapshot_checks(spark, LAYOUT, source, 0, {T: KEY})
    assert counts == {T: len(s0) + 1} and not result.passed
    assert result.metadata["duplicated_keys"].value == {T: 1}


def test_a_table_a_delta_leaves_as_is_gets_nothing(spark, source):
    """Two tables; deltas that change only one of them. The other gets nothing (issue 57: no
    commit, no tag; the manifest says it had no change: no fold job, no materialization), reads
    back as of every delta, and a range of such deltas does the same; the manifest is read from
    the tables' lowest last applied delta on."""
    from bench.round_trips import counting_round_trips
    from resources.spark.iceberg_reads import delta_tags

    def other(key, order, x) -> Change:
        return Change(source="test", namespace="ns", table="others", operation=UPSERT, key_columns=KEY,
                      values={"id": key, "x": x}, order_key=order, captured=None, event_id=None, is_backfill=False)

    keys = {T: KEY, "others": KEY}
    land_and_apply(spark, source, 0, {T: [full(1, (1,), "a", 1, 1.0)], "others": [other(1, (1,), "x0")]}, keys)
    land(spark, source, 1, {T: [full(2, (2,), "b", 2, 2.0)]})
    with counting_round_trips() as trips:
        applied = apply_cdc_through(spark, LAYOUT, source, 1, keys)
    assert sorted((a.table, a.delta_num, a.skipped) for a in applied) == [(T, 1, False)]
    checkpoints = [s for s in trips.to_dict(top=200)["top_sites"] if s["site"].endswith(" local_checkpoint")]
    # things' only: its stored rows of the changes' keys (for the fold and the history), its fold
    assert sum(s["calls"] for s in checkpoints) == 2, checkpoints
    ident = LAYOUT.snapshot(source, "others")
    assert last_applied_delta(spark, ident) == 0 and sorted(delta_tags(spark, ident)) == [0]
    assert spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0] == 1  # no commit
    # A range: delta 2 changes nothing, delta 3 only `others`.
    land(spark, source, 2, {})  # a delta with no change at all
    land(spark, source, 3, {"others": [other(1, (5,), "x3"), other(2, (6,), "y3")]})
    apply_cdc_through(spark, LAYOUT, source, 3, keys)
    want_others = {0: {1: "x0"}, 1: {1: "x0"}, 2: {1: "x0"}, 3: {1: "x3", 2: "y3"}}
    want_things = {0: {1: "a"}, 1: {1: "a", 2: "b"}, 2: {1: "a", 2: "b"}, 3: {1: "a", 2: "b"}}
    for n in range(4):
        assert {r["id"]: r["x"] for r in cdc_rows_as_of(spark, LAYOUT, source, "others", n)} == want_others[n], n
        assert {r["id"]: r["a"] for r in cdc_rows_as_of(spark, LAYOUT, source, T, n)} == want_things[n], n
    # `things` left alone by 2 and 3: still at its own last change; `others` folded nothing around 3
    assert last_applied_delta(spark, LAYOUT.snapshot(source, T)) == 1
    assert sorted(delta_tags(spark, ident)) == [0, 3]


def test_a_short_key_list_narrows_the_stored_rows_scan_and_the_merge_and_stays_exact(spark, source, monkeypatch):
    """A stream delta of few changes on a table big enough for the MERGE's key filter: the filter
    is worked out once, goes into the scan of the stored rows the fold and the history read
    (Iceberg skips the row groups whose key range holds none of the keys) and into the MERGE, and
    every delta reads back exact, the history's closed versions too."""
    from resources.lake import cdc
    from resources.lake.prostore_history import history_ident
    from tests.support.key_filters import recorded_key_filters

    made = recorded_key_filters(monkeypatch)  # the key lists cdc.py worked out
    scans = []
    real_stored = cdc.stored_of_changes

    def stored(changes, target, keys, **kwargs):
        target.createOrReplaceTempView("stored_scan")
        plan = spark.sql("EXPLAIN SELECT * FROM stored_scan").first()[0]
        scans.append(next(line for line in plan.splitlines() if "BatchScan" in line))
        return real_stored(changes, target, keys, **kwargs)

    monkeypatch.setattr(cdc, "stored_of_changes", stored)
    columns = spark_columns()
    state = {}
    for n in range(4):  # one delta a run: a data file of its own keys each
        chs = [full(k, (k,), f"v{k}", k, float(k)) for k in range(250 * n + 1, 250 * n + 251)]
        land_cdc_increment(spark, LAYOUT, source, n, {T: changes_frame(spark, chs, columns)})
        apply_cdc_through(spark, LAYOUT, source, n, {T: KEY})
        state |= {k: (f"v{k}", k, float(k)) for k in range(250 * n + 1, 250 * n + 251)}
    made.clear()
    last = [full(5, (2000,), "new5", 55, 5.5), change(DELETE, 7, (2001,)), full(5000, (2002,), "ins", 1, 1.0)]
    land_cdc_increment(spark, LAYOUT, source, 4, {T: changes_frame(spark, last, columns)})
    apply_cdc_through(spark, LAYOUT, source, 4, {T: KEY})
    assert len(made) == 1 and made[0] is not None and "5000L" in made[0], made  # once, for the scan and the MERGE
    assert "5000" in scans[-1], scans[-1]  # the list is among the stored rows' scan's own filters
    after = {**state, 5: ("new5", 55, 5.5), 5000: ("ins", 1, 1.0)}
    del after[7]
    for n, want in ((3, state), (4, after)):
        got = {r["id"]: (r["a"], r["b"], r["c"]) for r in cdc_rows_as_of(spark, LAYOUT, source, T, n)}
        assert got == want, f"as of delta {n}"
    closed = spark.table(history_ident(LAYOUT, source, T)).where("sys_to = 3")
    assert sorted((r["id"], r["a"], r["sys_op"]) for r in closed.collect()) == [(5, "v5", 0), (7, "v7", 1)]


def test_a_write_whose_counts_never_reach_the_client_counts_its_commit_back(spark, source, monkeypatch):
    """As a datamart's landing (test_snapshot_ranges): no observed counts (SPARK-54279, a loaded
    server) -> each delta's rows, upserts and deletes counted back from the commit, exact."""
    from pyspark.sql.connect.observation import Observation

    monkeypatch.setattr(Observation, "get", property(lambda self: {}))
    changes = [full(1, (1,), "a", 1, 1.0), full(2, (2,), "b", 2, 2.0), change(DELETE, 1, (3,))]
    frames = {T: changes_frame(spark, changes, infer_columns(changes, []))}
    stats = land_cdc_increment(spark, LAYOUT, source, 0, frames)
    assert [(s.table, s.rows, s.upserts, s.deletes) for s in stats] == [(T, 3, 2, 1)]

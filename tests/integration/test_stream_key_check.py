"""A change stream's snapshot check and MERGE at O(delta) (issue 30, item 3, for change streams).

A stream table of 2,000 keys, then a delta of 50 changes: `snapshot_checks` given the deltas the
run applied counts live rows exactly, says which deltas' keys it checked, finds a key held twice
among them (NULL too: a stream's keys compare with `<=>`), and shuffles a row per touched key,
not per key of the table. When the table's key columns changed since its commit before the run,
untouched rows may clash under the new key: every key is checked then.

Hand-made changes (no Kafka), real Spark Connect and real Iceberg tables.
"""

from __future__ import annotations

import json

import pytest

from platform_assets.streams.checks import snapshot_checks
from resources.codecs.cdc import UPSERT, Change
from resources.lake.cdc import KEYS_PROPERTY, apply_cdc_through, changes_frame, land_cdc_increment
from resources.lake.key_check import KeyCheckInput, key_check_frame
from resources.lake.layout import LakeLayout
from tests.integration.test_key_check import _shuffled

pytestmark = pytest.mark.integration

LAYOUT = LakeLayout()
T, KEY, ROWS = "things", ("id",), 2000


def upsert(key, order, a) -> Change:
    return Change(source="test", namespace="ns", table=T, operation=UPSERT, key_columns=KEY,
                  values={"id": key, "a": a}, order_key=order)


def columns():
    from pyspark.sql import types as Ty

    return [("id", Ty.LongType()), ("a", Ty.StringType())]


@pytest.fixture
def source(spark, lake_ns: str) -> str:
    """A source whose table holds keys 1..ROWS (delta 0) and NULL, then 50 of them changed (delta 1)."""
    src = lake_ns.split(".", 1)[1]
    first = [upsert(k, (k,), "v") for k in range(1, ROWS + 1)] + [upsert(None, (1,), "null key")]
    land_cdc_increment(spark, LAYOUT, src, 0, {T: changes_frame(spark, first, columns())})
    apply_cdc_through(spark, LAYOUT, src, 0, {T: KEY})
    second = [upsert(k, (ROWS + k,), "u") for k in range(1, 50)] + [upsert(None, (ROWS,), "null again")]
    land_cdc_increment(spark, LAYOUT, src, 1, {T: changes_frame(spark, second, columns())})
    apply_cdc_through(spark, LAYOUT, src, 1, {T: KEY})
    return src


def test_the_stream_check_looks_at_the_run_keys_and_finds_a_key_held_twice(spark, source):
    counts, (result,) = snapshot_checks(spark, LAYOUT, source, 1, {T: KEY}, deltas={T: [1]})
    assert counts == {T: ROWS + 1} and result.passed
    assert result.metadata["keys_of_deltas"].value == {T: "1"}

    ident = LAYOUT.snapshot(source, T)
    spark.sql(f"INSERT INTO {ident} SELECT * FROM {ident} WHERE id = 7 OR id IS NULL")  # touched keys, twice
    counts, (result,) = snapshot_checks(spark, LAYOUT, source, 1, {T: KEY}, deltas={T: [1]})
    assert counts == {T: ROWS + 3}
    assert not result.passed and result.metadata["duplicated_keys"].value == {T: 2}


def test_the_stream_check_shuffles_rows_of_the_touched_keys_not_of_the_table(spark, source):
    table = spark.table(LAYOUT.snapshot(source, T))
    touched = spark.table(LAYOUT.increment(source, T)).where("delta_num = 1")
    frame = key_check_frame([KeyCheckInput(T, table, touched, list(KEY), null_safe=True)])
    assert {r["t"]: r["rows"] for r in frame.collect()} == {T: ROWS + 1}
    shuffled = _shuffled(frame)
    assert 0 < shuffled <= 2 * (50 + 16), shuffled


def test_a_key_changed_since_the_last_commit_checks_every_key(spark, source):
    """Rows the run did not touch are unique under the old key, not necessarily under the new one."""
    ident = LAYOUT.snapshot(source, T)
    # A commit saying the key was `a` before delta 1, holding a second row of the untouched key
    # 100: the run's keys alone would not see it. It says so under the plain name, as commits
    # made before the tables' own keys (session_properties.own_property) do: still read.
    spark.conf.set("spark.sql.iceberg.snapshot-property." + KEYS_PROPERTY, json.dumps(["a"]))
    spark.conf.set("spark.sql.iceberg.snapshot-property.deltaport.delta", "0")
    try:
        spark.sql(f"INSERT INTO {ident} SELECT * FROM {ident} WHERE id = 100")  # id 100 twice, untouched
    finally:
        spark.conf.unset("spark.sql.iceberg.snapshot-property." + KEYS_PROPERTY)
        spark.conf.unset("spark.sql.iceberg.snapshot-property.deltaport.delta")
    _, (result,) = snapshot_checks(spark, LAYOUT, source, 1, {T: KEY}, deltas={T: [1]})
    assert result.metadata["keys_of_deltas"].value == {}  # the run's keys were not enough: all checked
    assert not result.passed and result.metadata["duplicated_keys"].value == {T: 1}


def test_the_stream_merge_names_the_changes_keys_unless_one_is_null(spark, source, monkeypatch):
    """resources/lake/cdc.py's MERGE narrows its target to the changes' keys (merge_keys.py); its
    keys match with `<=>`, which an IN list cannot say for NULL: a NULL key means no filter."""
    from tests.support.key_filters import recorded_key_filters

    said = recorded_key_filters(monkeypatch)  # what cdc.py's key list came to (null-safe)
    third = [upsert(k, (3 * ROWS + k,), "w") for k in (3, 4)]
    land_cdc_increment(spark, LAYOUT, source, 2, {T: changes_frame(spark, third, columns())})
    apply_cdc_through(spark, LAYOUT, source, 2, {T: KEY})
    assert said in (["t.`id` IN (3L, 4L)"], ["t.`id` IN (4L, 3L)"])  # 2 keys, 1,000 rows each: it pays
    fourth = [upsert(None, (3 * ROWS,), "null three"), upsert(5, (3 * ROWS + 5,), "x")]
    land_cdc_increment(spark, LAYOUT, source, 3, {T: changes_frame(spark, fourth, columns())})
    apply_cdc_through(spark, LAYOUT, source, 3, {T: KEY})
    assert said[-1] is None
    rows = {r["id"]: r["a"] for r in spark.table(LAYOUT.snapshot(source, T)).collect()}
    assert len(rows) == ROWS + 1 and rows[None] == "null three" and (rows[3], rows[4], rows[5]) == ("w", "w", "x")
    assert rows[60] == "v" and rows[1] == "u"


def test_stream_snapshots_are_merge_on_read_and_older_tables_become_so(spark, source):
    """A copy-on-write MERGE rewrote every data file holding a changed key (all of them, for keys
    spread over the table); merge-on-read writes the changed rows and a delete file."""
    from resources.spark import table_properties

    ident = LAYOUT.snapshot(source, T)

    def merge_mode():
        return {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}.get("write.merge.mode")

    assert merge_mode() == "merge-on-read"
    assert 1 in {r["content"] for r in spark.table(f"{ident}.files").select("content").collect()}  # position deletes
    spark.sql(f"ALTER TABLE {ident} UNSET TBLPROPERTIES ('write.merge.mode', 'write.update.mode', 'write.delete.mode')")
    table_properties._seen.clear()  # as a new process meets a table made before
    land_cdc_increment(spark, LAYOUT, source, 2, {T: changes_frame(spark, [upsert(9, (4 * ROWS,), "z")], columns())})
    apply_cdc_through(spark, LAYOUT, source, 2, {T: KEY})
    assert merge_mode() == "merge-on-read"


def test_the_fold_reads_the_stored_rows_of_the_changes_keys_only(spark, source):
    """resources/lake/cdc_fold.py joins the changes with the stored order of their keys: the
    table's other rows are dropped as it is scanned, not shuffled (a left join of the changes with
    the whole table shuffled every row of it: 2,001 here)."""
    from resources.lake.cdc_fold import fold_changes

    third = [upsert(k, (5 * ROWS + k,), "w") for k in range(100, 150)]
    land_cdc_increment(spark, LAYOUT, source, 2, {T: changes_frame(spark, third, columns())})
    target = spark.table(LAYOUT.snapshot(source, T))
    changes = spark.table(LAYOUT.increment(source, T)).where("delta_num = 2")
    types = {f.name: f.dataType for f in target.schema.fields}
    told = fold_changes(changes, target, KEY, ["id", "a"], types, several_deltas=False, changes_rows=50)
    untold = fold_changes(changes, target, KEY, ["id", "a"], types, several_deltas=False)
    # As on a big table: no side broadcast unless asked (every table here is under the threshold),
    # and the plan as planned (no adaptive re-planning).
    settings = {"spark.sql.autoBroadcastJoinThreshold": "-1", "spark.sql.adaptive.enabled": "false"}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        got, base = told.collect(), untold.collect()
    finally:
        for k in settings:
            spark.conf.unset(k)
    assert sorted(got) == sorted(base) and len(got) == 50
    assert _shuffled(told) <= 4 * (50 + 16), _shuffled(told)
    assert _shuffled(untold) >= ROWS  # how many changes is not known: the stored rows are shuffled


def _as_planned_on_a_big_table(spark, *frames) -> list[list]:
    """Every frame collected with no side broadcast unless asked (every table here is under the
    threshold) and the plan as planned (no adaptive re-planning), as on a big table."""
    settings = {"spark.sql.autoBroadcastJoinThreshold": "-1", "spark.sql.adaptive.enabled": "false"}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        return [f.collect() for f in frames]
    finally:
        for k in settings:
            spark.conf.unset(k)


def test_the_history_reads_the_stored_rows_of_the_changes_keys_only(spark, source):
    """resources/lake/stream_history.py joins the stored rows with a delta's fold (a checkpoint,
    whose size the planner does not know) or a fold's changes: told how many there are, the
    table's other rows are dropped as it is scanned; untold, every row of it, every column, was
    shuffled (2,001 here; 20M rows: 28 s of a 57 s delta)."""
    from resources.lake.cdc_fold import fold_changes
    from resources.lake.stream_history import closed_by_delta, closed_in_fold
    from resources.spark.session import local_checkpoint

    for n, first in ((2, 100), (3, 120)):
        more = [upsert(k, (n * 5 * ROWS + k,), f"w{n}") for k in range(first, first + 50)]
        land_cdc_increment(spark, LAYOUT, source, n, {T: changes_frame(spark, more, columns())})
    target = spark.table(LAYOUT.snapshot(source, T))
    one = spark.table(LAYOUT.increment(source, T)).where("delta_num = 2")
    types = {f.name: f.dataType for f in target.schema.fields}
    folded = local_checkpoint(fold_changes(one, target, KEY, ["id", "a"], types, several_deltas=False,
                                           changes_rows=50))
    two = spark.table(LAYOUT.increment(source, T)).where("delta_num BETWEEN 2 AND 3")
    frames = [closed_by_delta(target, folded, KEY, 2, rows=50), closed_by_delta(target, folded, KEY, 2),
              closed_in_fold(two, target, KEY, rows=100), closed_in_fold(two, target, KEY)]
    told, untold, told_fold, untold_fold = _as_planned_on_a_big_table(spark, *frames)
    assert sorted(told) == sorted(untold) and len(told) == 50
    assert sorted(told_fold) == sorted(untold_fold) and len(told_fold) == 100  # each delta closes 50
    assert _shuffled(frames[0]) <= 2 * (50 + 16), _shuffled(frames[0])
    assert _shuffled(frames[1]) >= ROWS
    # the fold's windows shuffle its 100 changes several times over (1,750 rows); untold, the
    # stored rows went through three shuffles besides (7,713)
    shuffled = [_shuffled(f) for f in frames[2:]]
    assert shuffled[0] < ROWS and shuffled[1] - shuffled[0] >= 2 * ROWS, shuffled

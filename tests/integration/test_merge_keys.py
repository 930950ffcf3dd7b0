"""The MERGE's target narrowed to the changes' keys (resources/spark/merge_keys.py): the filter is
pushed into the target's scan, below the join's shuffle; MERGEs with it stay exact for composite
keys whose text needs quoting; past its limit, or on a target too small for it to pay, there is
no filter and the MERGE is the same.

Real Spark Connect and real Iceberg tables.
"""

from __future__ import annotations

import pytest

from resources.lake.prostore import SNAPSHOT_TABLE_PROPERTIES
from resources.spark.iceberg import ensure_table
from resources.spark.iceberg_merge import merge_upserts
from resources.spark.merge_keys import target_key_filter

pytestmark = pytest.mark.integration

STATE = "region STRING, id BIGINT, name STRING"
CHANGE = "region STRING, id BIGINT, name STRING, sys_op INT"


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_the_key_filter_goes_below_the_shuffle_and_the_merge_stays_exact(spark, lake_ns):
    ident = f"{lake_ns}.state"
    ensure_table(spark, ident, spark.createDataFrame([], STATE).schema, properties=SNAPSHOT_TABLE_PROPERTIES)
    odd = "o'k\\n"  # a quote and a backslash: the filter's text must quote them
    merge_upserts(spark, ident, spark.createDataFrame(
        [(r, i, f"{r}{i}", 0) for r in ("eu", odd) for i in range(1, 201)], CHANGE), ["region", "id"], delta_num=1)
    changes = spark.createDataFrame([(odd, 5, "new", 0), ("eu", 7, None, 1), (odd, 999, "ins", 0), ("eu", 5, "E5", 0)],
                                    CHANGE)
    narrowed = target_key_filter(changes, ["region", "id"])
    assert narrowed is not None and narrowed.startswith("(t.`region`, t.`id`) IN (")
    changes.createOrReplaceTempView("src")
    plan = spark.sql(f"EXPLAIN MERGE INTO {ident} AS t USING src AS s ON t.region = s.region AND t.id = s.id "
                     f"AND {narrowed} WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *").first()[0]
    lines = plan.splitlines()
    scan = next(i for i, line in enumerate(lines) if f"BatchScan {ident}" in line)
    # The target's rows are filtered where they are scanned, below whatever join and exchange
    # come above.
    assert any("Filter" in line and "999" in line for line in lines[scan - 2:scan]), plan

    merge_upserts(spark, ident, changes, ["region", "id"], delta_num=2)
    want = ({(r, i, f"{r}{i}") for r in ("eu", odd) for i in range(1, 201)} - {(odd, 5, f"{odd}5"), ("eu", 7, "eu7"),
                                                                              ("eu", 5, "eu5")}
            | {(odd, 5, "new"), (odd, 999, "ins"), ("eu", 5, "E5")})
    assert _rows(spark.table(ident)) == sorted(want)


def test_past_its_limit_there_is_no_filter(spark):
    changes = spark.createDataFrame([("eu", i, "x", 0) for i in range(5)], CHANGE)
    assert target_key_filter(changes, ["id"], limit=4) is None
    text = target_key_filter(changes, ["id"], limit=5)
    # An integer key is a typed literal: a CAST per key cost the server seconds to plan.
    assert text.startswith("t.`id` IN (") and sorted(text[len("t.`id` IN ("):-1].split(", ")) == sorted(
        f"{i}L" for i in range(5))


def test_the_filter_is_left_out_where_the_target_is_too_small_for_it_to_pay(spark, lake_ns, monkeypatch):
    ident = f"{lake_ns}.small"
    ensure_table(spark, ident, spark.createDataFrame([], STATE).schema, properties=SNAPSHOT_TABLE_PROPERTIES)
    size = 1000  # 166 rows per key for 6 keys (under merge_keys.MIN_TARGET_ROWS_PER_KEY, 200), 500 for 2
    merge_upserts(spark, ident, spark.createDataFrame([("eu", i, "a", 0) for i in range(size)], CHANGE),
                  ["region", "id"], delta_num=1)
    said = []
    sql = spark.sql
    monkeypatch.setattr(spark, "sql", lambda text, *a, **kw: said.append(text) or sql(text, *a, **kw))

    def merged(changes, delta):  # the text of the MERGE that applied `changes`
        said.clear()
        merge_upserts(spark, ident, spark.createDataFrame(changes, CHANGE), ["region", "id"], delta_num=delta)
        return next(t for t in said if t.startswith("MERGE INTO"))

    # 6 keys into 1000 rows: too few rows per key for the filter to pay; no key list.
    text = merged([("eu", i, "b", 0) for i in range(5)] + [("eu", size + 1, "new", 0)], 2)
    assert " IN (" not in text, text[:300]
    # 2 keys: enough rows per key; the list, integers as typed literals.
    text = merged([("eu", 7, None, 1), ("eu", 8, "c", 0)], 3)
    assert "(t.`region`, t.`id`) IN (('eu', 7L), ('eu', 8L))" in text or \
        "(t.`region`, t.`id`) IN (('eu', 8L), ('eu', 7L))" in text, text[:300]
    want = ({("eu", i, "a") for i in range(5, size)} | {("eu", i, "b") for i in range(5)}
            | {("eu", size + 1, "new")}) - {("eu", 7, "a"), ("eu", 8, "a")} | {("eu", 8, "c")}
    assert _rows(spark.table(ident)) == sorted(want)


def test_told_how_many_changes_it_reads_no_keys_for_a_target_too_small(spark, lake_ns):
    from pyspark.sql import functions as F

    from resources.spark.merge_keys import target_rows

    ident = f"{lake_ns}.sized"
    ensure_table(spark, ident, spark.createDataFrame([], STATE).schema, properties=SNAPSHOT_TABLE_PROPERTIES)
    merge_upserts(spark, ident, spark.createDataFrame([("eu", i, "a", 0) for i in range(1000)], CHANGE),
                  ["region", "id"], delta_num=1)
    # Keys that fail when read: the choice must be made from the counts alone.
    unreadable = spark.createDataFrame([("eu", 1, "b", 0)], CHANGE).withColumn(
        "id", F.raise_error(F.lit("the keys were read")).cast("bigint"))
    assert target_key_filter(unreadable, ["region", "id"], target_size=target_rows(spark, ident),
                             changes_rows=6) is None  # 166 rows per change: under 200
    readable = spark.createDataFrame([("eu", 1, "b", 0), ("eu", 2, "c", 0)], CHANGE)
    text = target_key_filter(readable, ["region", "id"], target_size=target_rows(spark, ident), changes_rows=2)
    assert text is not None and "('eu', 1L)" in text and "('eu', 2L)" in text, text
    # A size the caller has read already weighs the same, with no query of its own.
    assert target_key_filter(unreadable, ["region", "id"], target_size=1000, changes_rows=6) is None
    assert target_key_filter(readable, ["region", "id"], target_size=1000, changes_rows=2) == text
    assert target_key_filter(readable, ["region", "id"], target_size=300) is None  # 150 rows per key
    assert target_key_filter(readable, ["region", "id"], target_size=1000) == text


def test_binary_and_string_keys_travel_as_hex_and_any_bytes_round_trip(spark, lake_ns):
    """A change stream's key may be binary (DataWorks' bytes 0x97...: not UTF-8) or a string with
    quotes: binary values go as hex literals, strings quoted, and the MERGE stays exact."""
    ident = f"{lake_ns}.bin_state"
    schema = "k BINARY, s STRING, v STRING"
    ensure_table(spark, ident, spark.createDataFrame([], schema).schema, properties=SNAPSHOT_TABLE_PROPERTIES)
    base = [(bytes([0x97, i]), f"o'k{i}", "old") for i in range(50)]
    spark.createDataFrame(base, schema).writeTo(ident).append()
    changes = spark.createDataFrame([(bytes([0x97, 3]), "o'k3", "new", 0), (bytes([0xff]), "x", "ins", 0)],
                                    f"{schema}, sys_op INT")
    narrowed = target_key_filter(changes, ["k", "s"])
    assert narrowed.startswith("(t.`k`, t.`s`) IN ((X'97") and "'o\\'k3'" in narrowed, narrowed
    merge_upserts(spark, ident, changes, ["k", "s"], delta_num=1)
    got = {(bytes(r["k"]), r["s"]): r["v"] for r in spark.table(ident).collect()}
    assert len(got) == 51 and got[(bytes([0x97, 3]), "o'k3")] == "new" and got[(bytes([0xff]), "x")] == "ins"
    assert got[(bytes([0x97, 4]), "o'k4")] == "old"

"""The MERGE's target narrowed to the changes' keys (resources/spark/merge_keys.py): the filter is
pushed into the target's scan, below the join's shuffle; MERGEs with it stay exact for composite
keys whose text needs quoting; past its limit there is no filter and the MERGE is the same.

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
    assert text.startswith("t.`id` IN (") and sorted(text[len("t.`id` IN ("):-1].split(", ")) == sorted(
        f"CAST('{i}' AS bigint)" for i in range(5))


def test_binary_and_string_keys_travel_as_hex_and_any_bytes_round_trip(spark, lake_ns):
    """A change stream's key may be binary (DataWorks' bytes 0x97...: not UTF-8) or a string with
    quotes: the filter's values are hex, cast back, and the MERGE stays exact."""
    ident = f"{lake_ns}.bin_state"
    schema = "k BINARY, s STRING, v STRING"
    ensure_table(spark, ident, spark.createDataFrame([], schema).schema, properties=SNAPSHOT_TABLE_PROPERTIES)
    base = [(bytes([0x97, i]), f"o'k{i}", "old") for i in range(50)]
    spark.createDataFrame(base, schema).writeTo(ident).append()
    changes = spark.createDataFrame([(bytes([0x97, 3]), "o'k3", "new", 0), (bytes([0xff]), "x", "ins", 0)],
                                    f"{schema}, sys_op INT")
    narrowed = target_key_filter(changes, ["k", "s"])
    assert narrowed.startswith("(t.`k`, t.`s`) IN ((CAST(X'97") and "AS binary" in narrowed, narrowed
    merge_upserts(spark, ident, changes, ["k", "s"], delta_num=1)
    got = {(bytes(r["k"]), r["s"]): r["v"] for r in spark.table(ident).collect()}
    assert len(got) == 51 and got[(bytes([0x97, 3]), "o'k3")] == "new" and got[(bytes([0xff]), "x")] == "ins"
    assert got[(bytes([0x97, 4]), "o'k4")] == "old"

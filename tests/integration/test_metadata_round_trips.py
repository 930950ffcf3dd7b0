"""What the metadata reads on a steady delta's path cost in Spark Connect round trips, on a real
server and real Iceberg tables (bench/round_trips.py counts them).

Each of these reads is one query. Sent as SQL text, a query costs two round trips, both on the
critical path: `spark.sql` sends the text and the server parses and analyses it (loading the
tables' metadata), then `collect` sends it again to be analysed and run. Built as a DataFrame it
is sent once. Counted, not timed: a round trip more is a failure whatever the machine's load."""

from __future__ import annotations

import pytest

from bench.round_trips import counting_round_trips
from resources.spark.iceberg import commit_delta, committed_records, ensure_table, replace_deltas
from resources.spark.iceberg_reads import last_applied_deltas

pytestmark = pytest.mark.integration


def _executes(trips, function: str) -> int:
    """ExecutePlan calls made from `function` (bench/round_trips.py files each call by call site)."""
    return sum(calls for site, (calls, _) in trips.sites.items()
               if site.startswith("execute ") and site.endswith(f" {function}"))


def test_each_metadata_query_of_a_steady_delta_is_one_round_trip(spark, lake_ns):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("v", StringType()),
                         StructField("delta_num", LongType())])
    a, b = f"{lake_ns}.a", f"{lake_ns}.b"
    for ident in (a, b):
        ensure_table(spark, ident, schema, partition_by=["delta_num"])
    commit_delta(spark, a, spark.createDataFrame([(1, "x", 1)], schema), delta_num=1, mode="replace_delta")
    commit_delta(spark, b, spark.createDataFrame([(1, "y", 2)], schema), delta_num=2, mode="replace_delta")
    commit = replace_deltas(spark, b, spark.createDataFrame([(2, "z", 3), (3, "w", 3)], schema), [3])

    with counting_round_trips() as trips:
        assert last_applied_deltas(spark, [a, b]) == {a: 1, b: 3}
        assert committed_records(spark, {b: commit}) == {b: 2}
        tagged = commit_delta(spark, a, spark.createDataFrame([(4, "v", 4)], schema), delta_num=4, mode="append")
    assert tagged.tag == "delta_4" and tagged.summary["added-records"] == "1"
    assert last_applied_deltas(spark, [a]) == {a: 4}
    # one query each (the refreshes before last_applied_deltas' query are filed under `refreshed`)
    assert _executes(trips, "last_applied_deltas") == 1, trips.to_dict(top=30)
    assert _executes(trips, "committed_records") == 1, trips.to_dict(top=30)
    # the commit's snapshot found by its id (one query), then the tag (one command)
    assert _executes(trips, "_tag_commit") == 2, trips.to_dict(top=30)

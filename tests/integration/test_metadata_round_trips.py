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


def test_a_steady_delta_reads_each_changed_snapshot_tables_schema_once_and_leaves_an_unchanged_one_alone(
        spark, lake_ns):
    from resources.codecs.backup import ChangelogRecord
    from resources.lake.layout import LakeLayout
    from resources.lake.prostore import IncrementDelta, land_changelogs, land_increments
    from resources.lake.prostore_snapshot import apply_snapshots
    from resources.lake.read import rows_as_of
    from resources.spark.kafka_reader import output_spark_schema

    layout, dm = LakeLayout("lake"), lake_ns.split(".", 1)[1]
    log = [ChangelogRecord(0, "t", "CREATE TABLE dm.t (id BIGINT NOT NULL, a VARCHAR, PRIMARY KEY (id))"),
           ChangelogRecord(1, "u", "CREATE TABLE dm.u (id BIGINT NOT NULL, b VARCHAR, PRIMARY KEY (id))")]

    def land(n: int, changes: dict[str, list]) -> None:
        entities = land_changelogs(spark, layout, dm, [(n, f"inc-{n}", log)])[n]
        frames = {t: spark.createDataFrame([(*r, 0, k) for k, r in enumerate(rows)],
                                           output_spark_schema(entities[t].columns)) for t, rows in changes.items()}
        land_increments(spark, layout, dm, [IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, frames)])

    land(0, {"t": [(1, "x", 0), (2, "y", 0)], "u": [(1, "p", 0)]})
    apply_snapshots(spark, layout, dm, 0)
    commits_of_u = spark.table(f"{layout.increment(dm, 'u')}.snapshots").count()
    land(1, {"t": [(2, "y1", 0), (1, None, 1)]})  # u unchanged: nothing records delta 1 on it (issue 57)
    # ... and its increment table gets no commit for it (t's does)
    assert spark.table(f"{layout.increment(dm, 'u')}.snapshots").count() == commits_of_u
    assert spark.table(layout.increment(dm, "u")).where("delta_num = 1").count() == 0
    assert spark.table(layout.increment(dm, "t")).where("delta_num = 1").count() == 2
    with counting_round_trips() as trips:
        apply_snapshots(spark, layout, dm, 1)
    assert [(r["id"], r["a"]) for r in rows_as_of(spark, layout, dm, "t", 1)] == [(2, "y1")]
    assert [(r["id"], r["b"]) for r in rows_as_of(spark, layout, dm, "u", 1)] == [(1, "p")]
    analyzed = sum(calls for site, (calls, _) in trips.sites.items()
                   if site.startswith("analyze ") and site.endswith((" _apply_delta", " schema_or_none")))
    # t: its schema once, the history table's in its write, the MERGE's target; u: nothing
    assert analyzed == 4, trips.to_dict(top=40)
    # u has no step in the plan: no tag, no call at all
    assert _executes(trips, "tag_unchanged") == 0, trips.to_dict(top=40)

"""A table's first delta in fewer commits, every reader still exact (real Spark and Iceberg).

The increment table is made holding its first rows in one commit; the snapshot table's first
rows are an INSERT (no MERGE against nothing) and its history table is made empty (no commit of
no closed version); a later delta goes the usual way. Checked: the commits and what they record,
the tables' columns (nullable, as `ensure_table` makes them), the key rules at birth, and the
rows as of each delta on both engines.
"""

from __future__ import annotations

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.lake.history_layout import partition_fields
from resources.lake.layout import LakeLayout
from resources.lake.prostore import IncrementDelta, land_changelogs, land_increments
from resources.lake.prostore_history import history_ident
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of
from resources.spark.iceberg import DELTA_PROPERTY, DELTAS_PROPERTY, KeyViolationError, _quote, create_with_deltas
from resources.spark.iceberg_reads import delta_tags
from resources.spark.kafka_reader import output_spark_schema

pytestmark = pytest.mark.integration

LOG = [ChangelogRecord(0, "t", "CREATE TABLE dm.t (id BIGINT NOT NULL, a VARCHAR, PRIMARY KEY (id))"),
       ChangelogRecord(1, "u", "CREATE TABLE dm.u (id BIGINT NOT NULL, b VARCHAR, PRIMARY KEY (id))")]


def _land(spark, layout, dm: str, n: int, changes: dict[str, list]) -> None:
    """Delta n's changelog and increment: {table: [(id, value, sys_op)]}."""
    entities = land_changelogs(spark, layout, dm, [(n, f"inc-{n}", LOG)])[n]
    frames = {t: spark.createDataFrame([(*r, 0, k) for k, r in enumerate(rows)],
                                       output_spark_schema(entities[t].columns)) for t, rows in changes.items()}
    land_increments(spark, layout, dm, [IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, frames)])


def _commits(spark, ident: str) -> list[dict]:
    """The table's snapshots' summaries, oldest first, and how many metadata files it wrote."""
    spark.catalog.refreshTable(ident)
    rows = spark.sql(f"SELECT summary FROM {_quote(ident)}.snapshots ORDER BY committed_at").collect()
    return [dict(r["summary"]) for r in rows]


def _metadata_files(spark, ident: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {_quote(ident)}.metadata_log_entries").collect()[0][0]


def test_a_tables_first_delta_makes_each_table_in_as_few_commits_and_reads_exactly(spark, lake_ns):
    layout, dm = LakeLayout("lake"), lake_ns.split(".", 1)[1]
    # t: an insert, a key written twice alike (a Kafka retry), a delete of a key the table never
    # had; u: no row at its first delta.
    _land(spark, layout, dm, 0, {"t": [(1, "x", 0), (2, "y", 0), (2, "y", 0), (3, None, 1)]})
    apply_snapshots(spark, layout, dm, 0)

    inc = layout.increment(dm, "t")
    (made,) = _commits(spark, inc)  # made holding its rows: one commit, one metadata file
    assert _metadata_files(spark, inc) == 1
    assert made[DELTA_PROPERTY] == "0" and made[DELTAS_PROPERTY] == "0" and made["deltaport.increment-id"] == "inc-0"
    assert made["added-records"] == "4"
    assert all(f.nullable for f in spark.table(inc).schema.fields)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {_quote(inc)}").collect()}
    assert props["write.metadata.previous-versions-max"] == "20"
    assert partition_fields(spark, inc) == ["delta_num"]
    (empty,) = _commits(spark, layout.increment(dm, "u"))  # no row: made with its first, empty commit
    assert empty[DELTA_PROPERTY] == "0" and empty["total-records"] == "0"

    snap = layout.snapshot(dm, "t")
    inserted = _commits(spark, snap)
    assert len(inserted) == 1 and inserted[0][DELTA_PROPERTY] == "0" and inserted[0]["added-records"] == "2"
    assert set(delta_tags(spark, snap)) == {0}
    # create, the rows, the tag: the history's empty write and its commits are gone
    assert _metadata_files(spark, snap) == 3
    closed = history_ident(layout, dm, "t")
    assert spark.catalog.tableExists(closed) and _commits(spark, closed) == []
    assert all(f.nullable for f in spark.table(snap).schema.fields)

    _land(spark, layout, dm, 1, {"t": [(1, "x1", 0), (2, None, 1), (4, "z", 0)], "u": [(7, "p", 0)]})
    apply_snapshots(spark, layout, dm, 1)
    truth = {0: {"t": [(1, "x"), (2, "y")], "u": []},
             1: {"t": [(1, "x1"), (4, "z")], "u": [(7, "p")]}}
    for n, tables in truth.items():
        for table, rows in tables.items():
            got = [(r["id"], r["a" if table == "t" else "b"]) for r in rows_as_of(spark, layout, dm, table, n)]
            assert got == rows, (table, n)
    versions = spark.table(closed).orderBy("id").collect()  # delta 1 closed the versions of keys 1 and 2
    assert [(r["id"], r["sys_to"], r["sys_op"]) for r in versions] == [(1, 0, 0), (2, 0, 1)]


def test_two_different_changes_of_one_key_at_birth_write_nothing(spark, lake_ns):
    layout, dm = LakeLayout("lake"), lake_ns.split(".", 1)[1]
    _land(spark, layout, dm, 0, {"t": [(1, "x", 0), (1, "other", 0)]})
    with pytest.raises(KeyViolationError, match="delta 0"):
        apply_snapshots(spark, layout, dm, 0)
    snap = layout.snapshot(dm, "t")
    assert _commits(spark, snap) == [] and spark.table(snap).count() == 0


def test_a_table_made_with_rows_of_another_delta_is_not_made(spark, lake_ns):
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("delta_num", LongType())])
    ident = f"{lake_ns}.x"
    with pytest.raises(Exception, match="got a row of another delta"):
        create_with_deltas(spark, ident, schema, spark.createDataFrame([(1, 0), (2, 5)], schema), [0],
                           partition_by=["delta_num"])
    assert not spark.catalog.tableExists(ident)

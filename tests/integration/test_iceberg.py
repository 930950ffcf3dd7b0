"""The Spark + Iceberg layer against real Iceberg tables (resources/spark).

One Spark Connect server and client session for the whole run (conftest `spark`); each test works in its own
namespace (`lake_ns`). Nothing is mocked: tables live in a Hadoop catalog in a temp folder.
"""

from __future__ import annotations

import datetime as dt
import math

import dagster as dg
import pyarrow as pa
import pytest

from resources.spark.iceberg import (
    COMMIT_ID_PROPERTY,
    DELTA_PROPERTY,
    TIME_COMMENT,
    DeltaNotFoundError,
    IcebergTableError,
    KeyViolationError,
    SchemaEvolutionError,
    TableNotFoundError,
    commit_delta,
    ensure_table,
    replace_deltas,
    table_exists,
)
from resources.spark.iceberg_reads import (
    delta_tags,
    last_applied_delta,
    read_as_of_delta,
    repair_delta_tags,
    tag_unchanged,
)
from resources.spark.iceberg_merge import merge_upserts
from resources.spark.resource import SparkResource
from resources.spark.session import ICEBERG_EXTENSIONS, CatalogConfig, connect

pytestmark = pytest.mark.integration

INCREMENT = "id bigint, name string, delta_num bigint"
STATE = "region string, id bigint, name string, amount double"
CHANGE = STATE + ", sys_op int"


def _rows(df, *cols):  # noqa: ANN001 - a Spark DataFrame
    """The rows of `df` as sorted tuples (of `cols`, default all columns)."""
    picked = df.select(*cols) if cols else df
    return sorted(tuple(r) for r in picked.collect())


def _snapshots(spark, ident):  # noqa: ANN001
    query = f"SELECT snapshot_id, operation, summary FROM {ident}.snapshots ORDER BY committed_at"
    return spark.sql(query).collect()


def test_session_has_iceberg_catalog_and_small_machine_defaults(spark, record_property):
    conf = spark.conf
    assert ICEBERG_EXTENSIONS in conf.get("spark.sql.extensions")
    assert "iceberg-spark-runtime-4.1_2.13-1.11.0.jar" in conf.get("spark.jars")
    assert conf.get("spark.jars.packages", None) is None
    assert conf.get("spark.sql.catalog.lake") == "org.apache.iceberg.spark.SparkCatalog"
    assert conf.get("spark.sql.catalog.lake.type") == "hadoop"
    assert conf.get("spark.sql.catalog.lake.warehouse").startswith("/")
    assert conf.get("spark.sql.shuffle.partitions") == "4"
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.ui.enabled") == "false"
    # Interpreted evaluation: every delta's literals would make generated code compile anew.
    assert conf.get("spark.sql.codegen.wholeStage") == "false"
    assert conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    record_property("spark_start_seconds", conf.get("deltaport.tests.start-seconds"))


def test_replace_delta_is_idempotent_and_one_commit(spark, lake_ns):
    ident = f"{lake_ns}.increment"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema, partition_by=["delta_num"])
    assert table_exists(spark, ident)
    assert last_applied_delta(spark, ident) is None

    d1 = spark.createDataFrame([(1, "a"), (2, "b")], "id bigint, name string")  # delta_num filled in
    c1 = commit_delta(spark, ident, d1, delta_num=1, mode="replace_delta", extra_summary={"deltaport.source": "t"})
    d2 = spark.createDataFrame([(3, "c", 2)], INCREMENT)
    commit_delta(spark, ident, d2, delta_num=2, mode="replace_delta")
    assert _rows(spark.table(ident)) == [(1, "a", 1), (2, "b", 1), (3, "c", 2)]

    # Re-running delta 2 with other rows replaces exactly delta 2's rows, in one commit.
    before = len(_snapshots(spark, ident))
    d2_again = spark.createDataFrame([(3, "c2", 2), (4, "d", 2)], INCREMENT)
    c2 = commit_delta(spark, ident, d2_again, delta_num=2, mode="replace_delta")
    assert len(_snapshots(spark, ident)) == before + 1
    assert c2.operation == "overwrite"
    assert (c2.summary["deleted-records"], c2.summary["added-records"]) == ("1", "2")
    expected = [(1, "a", 1), (2, "b", 1), (3, "c2", 2), (4, "d", 2)]
    assert _rows(spark.table(ident)) == expected
    # ... and re-running it with the same rows gives the same table.
    commit_delta(spark, ident, d2_again, delta_num=2, mode="replace_delta")
    assert _rows(spark.table(ident)) == expected

    assert c1.summary[DELTA_PROPERTY] == "1" and c1.summary["deltaport.source"] == "t"
    tags = delta_tags(spark, ident)
    assert list(tags) == [1, 2] and tags[1] == c1.snapshot_id and tags[2] != c2.snapshot_id  # moved to the rerun
    assert last_applied_delta(spark, ident) == 2
    assert _rows(read_as_of_delta(spark, ident, 1)) == [(1, "a", 1), (2, "b", 1)]

    # A row of another delta fails the write; nothing is committed.
    before = len(_snapshots(spark, ident))
    wrong = spark.createDataFrame([(9, "x", 3)], INCREMENT)
    with pytest.raises(IcebergTableError, match="got a row of another delta"):
        commit_delta(spark, ident, wrong, delta_num=2, mode="replace_delta")
    assert len(_snapshots(spark, ident)) == before
    assert _rows(spark.table(ident)) == expected


def test_replace_deltas_lands_a_range_in_one_commit_and_is_idempotent(spark, lake_ns):
    ident = f"{lake_ns}.ranged"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema, partition_by=["delta_num"])
    replace_deltas(spark, ident, spark.createDataFrame([(1, "a", 1), (2, "old", 2)], INCREMENT), [1, 2])
    before = len(_snapshots(spark, ident))
    rng = spark.createDataFrame([(2, "b", 2), (3, "c", 3), (4, "d", 4)], INCREMENT)
    replace_deltas(spark, ident, rng, [2, 3, 4], extra_summary={"deltaport.source": "t"})
    snaps = _snapshots(spark, ident)
    assert len(snaps) == before + 1, "one commit for the whole range"
    expected = [(1, "a", 1), (2, "b", 2), (3, "c", 3), (4, "d", 4)]
    assert _rows(spark.table(ident)) == expected  # delta 1 untouched, 2 replaced, 3-4 added
    summary = spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    assert (summary[DELTA_PROPERTY], summary["deltaport.deltas"], summary["deltaport.source"]) == ("4", "2-4", "t")
    replace_deltas(spark, ident, rng, [2, 3, 4])  # re-running the range: the same table
    assert _rows(spark.table(ident)) == expected
    # A delta of the range with no row is emptied (its rows were replaced by none) ...
    replace_deltas(spark, ident, spark.createDataFrame([(3, "c", 3)], INCREMENT), [3, 4])
    assert _rows(spark.table(ident)) == expected[:3]
    # ... and a row outside the range fails the write; nothing is committed.
    count = len(_snapshots(spark, ident))
    with pytest.raises(IcebergTableError, match="got a row of another delta"):
        replace_deltas(spark, ident, spark.createDataFrame([(5, "e", 5)], INCREMENT), [3, 4])
    assert len(_snapshots(spark, ident)) == count and _rows(spark.table(ident)) == expected[:3]


def test_tag_unchanged_records_a_delta_by_a_tag_with_no_data_commit(spark, lake_ns):
    """`tag_unchanged`: what a DDL change with no row costs (a delta that changes nothing of a
    table records nothing on it, issue 57)."""
    ident = f"{lake_ns}.quiet"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema)
    assert not tag_unchanged(spark, ident, 0)  # no snapshot yet: nothing to tag, nothing done
    commit_delta(spark, ident, spark.createDataFrame([(1, "a", 1)], INCREMENT), delta_num=1, mode="append")
    before = len(_snapshots(spark, ident))
    assert tag_unchanged(spark, ident, 2) and tag_unchanged(spark, ident, 3)
    assert len(_snapshots(spark, ident)) == before  # no data commit
    assert last_applied_delta(spark, ident) == 3
    assert _rows(read_as_of_delta(spark, ident, 3)) == _rows(read_as_of_delta(spark, ident, 1))
    commit_delta(spark, ident, spark.createDataFrame([(2, "b", 4)], INCREMENT), delta_num=4, mode="append")
    assert last_applied_delta(spark, ident) == 4  # tags on older snapshots do not count
    assert tag_unchanged(spark, ident, 5) and last_applied_delta(spark, ident) == 5


def test_append_and_overwrite_modes(spark, lake_ns):
    ident = f"{lake_ns}.full"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema)
    rows = spark.createDataFrame([(1, "a", 5)], INCREMENT)
    commit_delta(spark, ident, rows, delta_num=5, mode="append")
    commit_delta(spark, ident, rows, delta_num=5, mode="append")
    assert spark.table(ident).count() == 2  # append is not idempotent, by definition
    replacement = spark.createDataFrame([(2, "b", 6)], INCREMENT)
    done = commit_delta(spark, ident, replacement, delta_num=6, mode="overwrite")
    assert _rows(spark.table(ident)) == [(2, "b", 6)]
    assert done.summary[DELTA_PROPERTY] == "6" and COMMIT_ID_PROPERTY in done.summary
    # An empty delta still commits (and is recorded and tagged).
    empty = commit_delta(spark, ident, spark.createDataFrame([], INCREMENT), delta_num=7, mode="append")
    assert last_applied_delta(spark, ident) == 7 and delta_tags(spark, ident)[7] == empty.snapshot_id
    # replace_delta on an unpartitioned table: whole files of that delta, found by column stats.
    no_delta = "id bigint, name string"
    commit_delta(spark, ident, spark.createDataFrame([(3, "c")], no_delta), delta_num=8, mode="replace_delta")
    commit_delta(spark, ident, spark.createDataFrame([(4, "d")], no_delta), delta_num=6, mode="replace_delta")
    assert _rows(spark.table(ident)) == [(3, "c", 8), (4, "d", 6)]
    with pytest.raises(IcebergTableError, match="mode must be one of"):
        commit_delta(spark, ident, rows, delta_num=9, mode="upsert")  # type: ignore[arg-type]


def test_merge_upserts_and_deletes_with_composite_key(spark, lake_ns):
    ident = f"{lake_ns}.state"
    ensure_table(spark, ident, spark.createDataFrame([], STATE).schema)
    delta1 = spark.createDataFrame(
        [("eu", 1, "one", 1.5, 0), ("eu", 2, "two", 2.5, 0), ("us", 1, "uno", 3.5, 0)], CHANGE
    )
    c1 = merge_upserts(spark, ident, delta1, ["region", "id"], delta_num=1)
    state1 = [("eu", 1, "one", 1.5), ("eu", 2, "two", 2.5), ("us", 1, "uno", 3.5)]
    assert _rows(spark.table(ident)) == state1

    delta2 = spark.createDataFrame(
        [
            ("eu", 1, "ONE", 10.0, 0),   # update
            ("eu", 1, "ONE", 10.0, 0),   # the same change again (a Kafka retry): harmless
            ("eu", 2, None, None, 1),    # delete
            ("eu", 2, None, None, 1),    # ... delivered twice, NULLs and all: still one change
            ("us", 2, "dos", 4.0, 0),    # insert: same id as an existing row, other region
            ("asia", 9, None, None, 1),  # delete of a row that never existed: no-op
            ("us", 3, "tres", 5.0, None),  # NULL sys_op counts as an upsert
            ("us", 3, "tres", 5.0, None),  # ... twice
        ],
        CHANGE,
    )
    c2 = merge_upserts(spark, ident, delta2, ["region", "id"], delta_num=2, extra_summary={"deltaport.rows": "6"})
    state2 = [("eu", 1, "ONE", 10.0), ("us", 1, "uno", 3.5), ("us", 2, "dos", 4.0), ("us", 3, "tres", 5.0)]
    assert _rows(spark.table(ident)) == state2

    # The delta number is in the MERGE commit's own summary, and the session setting is gone.
    snaps = {r["snapshot_id"]: r for r in _snapshots(spark, ident)}
    merge_snapshot = snaps[c2.snapshot_id]
    assert merge_snapshot["operation"] == "overwrite"
    assert merge_snapshot["summary"][DELTA_PROPERTY] == "2" and merge_snapshot["summary"]["deltaport.rows"] == "6"
    assert merge_snapshot["summary"]["spark.merge-into.num-target-rows-deleted"] == "1"
    assert spark.conf.get(f"spark.sql.iceberg.snapshot-property.{DELTA_PROPERTY}", None) is None
    assert last_applied_delta(spark, ident) == 2

    # Tags exist and time travel by tag returns the old state.
    assert delta_tags(spark, ident) == {1: c1.snapshot_id, 2: c2.snapshot_id}
    assert _rows(read_as_of_delta(spark, ident, 1)) == state1
    assert _rows(read_as_of_delta(spark, ident, 2)) == state2
    with pytest.raises(DeltaNotFoundError, match=r"no tag delta_3 \(tagged deltas: \[1, 2\]\)"):
        read_as_of_delta(spark, ident, 3)


def test_merge_refuses_conflicting_changes_and_writes_nothing(spark, lake_ns):
    ident = f"{lake_ns}.state"
    ensure_table(spark, ident, spark.createDataFrame([], STATE).schema)
    first = spark.createDataFrame([("eu", 1, "a", 1.0, 0)], CHANGE)
    merge_upserts(spark, ident, first, ["region", "id"], delta_num=1)
    before = len(_snapshots(spark, ident))
    twice = spark.createDataFrame([("eu", 1, "b", 2.0, 0), ("eu", 1, None, None, 1)], CHANGE)
    with pytest.raises(KeyViolationError, match=r"region='eu', id=1 \(2x\)"):
        merge_upserts(spark, ident, twice, ["region", "id"], delta_num=2)
    null_key = spark.createDataFrame([(None, 7, "n", 0.0, 0)], CHANGE)
    with pytest.raises(KeyViolationError, match="NULL keys"):
        merge_upserts(spark, ident, null_key, ["region", "id"], delta_num=2)
    missing = spark.createDataFrame([("eu", 1, 0)], "region string, id bigint, sys_op int")
    with pytest.raises(IcebergTableError, match=r"lack column\(s\) \['name', 'amount'\]"):
        merge_upserts(spark, ident, missing, ["region", "id"], delta_num=2)
    assert len(_snapshots(spark, ident)) == before
    assert last_applied_delta(spark, ident) == 1


def test_schema_evolution_adds_columns_and_never_drops(spark, lake_ns):
    ident = f"{lake_ns}.evolving"
    v1 = pa.schema([("id", pa.int32()), ("name", pa.string())])
    assert ensure_table(spark, ident, v1).created
    old = spark.createDataFrame([(1, "old")], "id int, name string")
    commit_delta(spark, ident, old, delta_num=1, mode="append")

    v2 = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("at", pa.time64("us"))])
    change = ensure_table(spark, ident, v2)
    assert (change.created, change.added_columns, change.widened_columns) == (False, ("score", "at"), ("id",))
    table = spark.table(ident)
    assert [(f.name, f.dataType.simpleString()) for f in table.schema.fields] == [
        ("id", "bigint"), ("name", "string"), ("score", "double"), ("at", "bigint")
    ]
    assert table.schema["at"].metadata.get("comment") == TIME_COMMENT
    new = spark.createDataFrame([(2, "new", 0.5, 1)], "id bigint, name string, score double, at bigint")
    commit_delta(spark, ident, new, delta_num=2, mode="append")
    assert _rows(spark.table(ident)) == [(1, "old", None, None), (2, "new", 0.5, 1)]
    assert _rows(read_as_of_delta(spark, ident, 1)) == [(1, "old")]  # the old snapshot keeps its schema

    # A schema that lacks columns drops nothing; narrower data types need no change.
    assert ensure_table(spark, ident, pa.schema([("id", pa.int32())])).added_columns == ()
    assert spark.table(ident).columns == ["id", "name", "score", "at"]
    with pytest.raises(SchemaEvolutionError, match="name: table has string, data has int"):
        ensure_table(spark, ident, pa.schema([("name", pa.int32())]))
    with pytest.raises(TableNotFoundError):
        last_applied_delta(spark, f"{lake_ns}.nope")


def test_types_round_trip(spark, lake_ns):
    """Prostore's types through Arrow → Spark → Iceberg → Spark → Arrow, unchanged; TIME as
    bigint microseconds since midnight."""
    ident = f"{lake_ns}.types"
    times = [dt.time(0, 0), dt.time(23, 59, 59, 999999), None]
    arrow = pa.table({
        "i64": pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        "i32": pa.array([-(2**31), 2**31 - 1, None], pa.int32()),
        "flag": pa.array([True, False, None], pa.bool_()),
        "f32": pa.array([1.5, -3.4028234663852886e38, None], pa.float32()),
        "f64": pa.array([math.pi, float("nan"), None], pa.float64()),
        "text": pa.array(["", "ünïcødé ✓ 'quoted'", None], pa.string()),
        "day": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None], pa.date32()),
        "ts": pa.array(
            [dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2262, 4, 11, 23, 47, 16, 854775), None],
            pa.timestamp("us"),
        ),
        "tod": pa.array(times, pa.time64("us")),
    })
    ensure_table(spark, ident, arrow.schema)
    assert [f.dataType.simpleString() for f in spark.table(ident).schema.fields] == [
        "bigint", "int", "boolean", "float", "double", "string", "date", "timestamp_ntz", "bigint"
    ]
    stored = arrow.set_column(arrow.schema.get_field_index("tod"), "tod", arrow["tod"].cast(pa.int64()))
    commit_delta(spark, ident, spark.createDataFrame(stored), delta_num=0, mode="overwrite")

    back = spark.table(ident).toArrow().sort_by("i32")
    expected = stored.sort_by("i32")
    for name in stored.column_names:
        got, want = back[name].to_pylist(), expected[name].to_pylist()
        if name == "f64":
            assert got[0] == want[0] and math.isnan(got[1]) and got[2] is None
        else:
            assert got == want, name
    assert back["ts"].type == pa.timestamp("us") and back["day"].type == pa.date32()
    assert back["f32"].type == pa.float32() and back["i32"].type == pa.int32()
    assert back["tod"].type == pa.int64() and back["tod"].to_pylist() == [0, 86_399_999_999, None]


def test_iceberg_runtime_rejects_spark_time_type(spark, lake_ns):
    """Finding pinned down: pyspark 4.1 has TimeType (SQL TIME behind spark.sql.timeType.enabled),
    but Iceberg 1.11's Spark 4.1 runtime cannot map it to Iceberg `time`. When this test fails,
    Iceberg learned TIME: revisit storing TIME as bigint micros."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake_ns}")
    with pytest.raises(Exception, match="UNSUPPORTED_TIME_TYPE"):
        spark.sql(f"CREATE TABLE {lake_ns}.t_off (t TIME) USING iceberg")
    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        with pytest.raises(Exception, match=r"Not a supported type: time\(6\)"):
            spark.sql(f"CREATE TABLE {lake_ns}.t_on (t TIME) USING iceberg")
    finally:
        spark.conf.unset("spark.sql.timeType.enabled")


def test_repair_delta_tags(spark, lake_ns):
    ident = f"{lake_ns}.tagged"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema, partition_by=["delta_num"])
    one = spark.createDataFrame([(1, "a", 1)], INCREMENT)
    c1 = commit_delta(spark, ident, one, delta_num=1, mode="replace_delta")
    spark.sql(f"ALTER TABLE {ident} DROP TAG delta_1")  # as if the process died before tagging
    assert delta_tags(spark, ident) == {}
    assert repair_delta_tags(spark, ident) == [1]
    assert delta_tags(spark, ident) == {1: c1.snapshot_id}
    assert repair_delta_tags(spark, ident) == []


def test_spark_resource_in_a_dagster_asset(spark, spark_remote, tmp_path):
    resource = SparkResource(catalog_name="res", warehouse=str(tmp_path / "res-lake"))  # $SPARK_REMOTE

    @dg.asset
    def numbers(spark_res: SparkResource) -> dg.MaterializeResult:
        session = spark_res.get_session()
        assert session is spark_res.get_session()  # cached
        ident = "res.db.numbers"
        schema = pa.schema([("n", pa.int64()), ("delta_num", pa.int64())])
        ensure_table(session, ident, schema, partition_by=["delta_num"])
        rows = session.createDataFrame([(1,), (2,)], "n bigint")
        done = commit_delta(session, ident, rows, delta_num=3, mode="replace_delta")
        return dg.MaterializeResult(metadata={"snapshot_id": str(done.snapshot_id)})

    result = dg.materialize([numbers], resources={"spark_res": resource})
    assert result.success
    # Catalogs are session settings: another session sees the table only through the same catalog.
    reader = connect(spark_remote, CatalogConfig(name="res", warehouse=str(tmp_path / "res-lake")))
    assert _rows(reader.table("res.db.numbers")) == [(1, 3), (2, 3)]
    assert reader is connect(spark_remote, CatalogConfig(name="res", warehouse=str(tmp_path / "res-lake")))
    elsewhere = connect(spark_remote, CatalogConfig(name="res", warehouse=str(tmp_path / "elsewhere")))
    assert elsewhere is not reader and not table_exists(elsewhere, "res.db.numbers")
    assert spark.conf.get("spark.sql.catalog.res", None) is None  # the tests' own session is untouched


def test_a_table_keeps_its_last_metadata_files_and_every_delta_stays_readable(spark, lake_ns):
    """ensure_table's TABLE_PROPERTIES: each commit writes a metadata file holding every snapshot
    and tag, and only the last 20 earlier ones stay on disk; reads as of the first delta, whose
    metadata file is long gone, still work (they read the current file's snapshots and tags)."""
    from pathlib import Path
    from urllib.parse import urlparse

    from resources.spark.iceberg import TABLE_PROPERTIES

    ident = f"{lake_ns}.tagged"
    ensure_table(spark, ident, spark.createDataFrame([], INCREMENT).schema, partition_by=["delta_num"])
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}
    assert {k: props.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES
    for n in range(1, 16):  # a write and a tag per delta: 30 commits
        commit_delta(spark, ident, spark.createDataFrame([(n, f"r{n}", n)], INCREMENT), delta_num=n, mode="append")
    files = [r.file for r in spark.table(f"{ident}.metadata_log_entries").collect()]
    folder = Path(urlparse(files[0]).path).parent
    on_disk = sorted(p.name for p in folder.glob("*.metadata.json"))
    assert len(on_disk) == 21 and len(files) == 21  # the current one and the 20 before it
    assert "v1.metadata.json" not in on_disk
    assert _rows(read_as_of_delta(spark, ident, 1)) == [(1, "r1", 1)]
    assert _rows(read_as_of_delta(spark, ident, 15)) == [(n, f"r{n}", n) for n in range(1, 16)]

"""A writer meeting a big table turns generated code on for its session, on a real server: the
embedded server's threshold reaches each session, the progress query sizes the tables, and a
small table leaves the session interpreted (resources/spark/codegen.py)."""

from __future__ import annotations

import pytest

from resources.lake.layout import LakeLayout
from resources.lake.prostore_snapshot import snapshot_progress
from resources.spark.codegen import DEFAULT_FROM_ROWS, FROM_ROWS_KEY
from resources.spark.iceberg import commit_delta, ensure_table
from resources.spark.iceberg_merge import merge_upserts
from resources.spark.iceberg_reads import last_applied_deltas
from resources.spark.session import CatalogConfig, connect

pytestmark = pytest.mark.integration


def _table(spark, ident: str, rows: int) -> None:
    frame = spark.range(rows).selectExpr("id", "CAST(id AS STRING) AS v", "CAST(NULL AS INT) AS sys_op")
    ensure_table(spark, ident, frame.drop("sys_op").schema)
    commit_delta(spark, ident, frame.drop("sys_op"), delta_num=1, mode="append")


def _session(spark_remote: str, tmp_path, name: str):
    return connect(spark_remote, CatalogConfig(name="lake", warehouse=str(tmp_path / name)))


def test_a_big_table_turns_generated_code_on_and_a_small_one_does_not(spark_remote, tmp_path):
    big = _session(spark_remote, tmp_path, "big")
    # the embedded server's own setting reaches a new session, generated code off beside it
    assert big.conf.get(FROM_ROWS_KEY) == str(DEFAULT_FROM_ROWS)
    assert big.conf.get("spark.sql.codegen.wholeStage") == "false"
    # a server without the setting (a user's own) answers None: `threshold` reads it so
    assert big.conf.get("spark.deltaport.no-such-setting", None) is None
    big.conf.set(FROM_ROWS_KEY, "50")
    _table(big, "lake.dm.t", 60)
    # the size is the newest delta commit's live rows: written minus deleted
    deletes = big.range(5).selectExpr("id", "CAST(NULL AS STRING) AS v", "1 AS sys_op")
    merge_upserts(big, "lake.dm.t", deletes, ["id"], delta_num=2)
    sizes: dict[str, int] = {}
    assert last_applied_deltas(big, ["lake.dm.t"], sizes=sizes) == {"lake.dm.t": 2}
    assert sizes == {"lake.dm.t": 55}
    assert big.conf.get("spark.sql.codegen.wholeStage") == "false"  # a reader does not switch
    assert snapshot_progress(big, LakeLayout(), "dm", ["t"]) == {"lake.dm.t": 2}
    assert big.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert big.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"

    small = _session(spark_remote, tmp_path, "small")
    small.conf.set(FROM_ROWS_KEY, "50")
    _table(small, "lake.dm.t", 40)
    assert snapshot_progress(small, LakeLayout(), "dm", ["t"]) == {"lake.dm.t": 1}
    assert small.conf.get("spark.sql.codegen.wholeStage") == "false"

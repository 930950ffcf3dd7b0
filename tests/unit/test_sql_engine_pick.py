"""`deltaport sql --engine auto`: Spark when a remote engine is configured (the file or
$SPARK_REMOTE) or the embedded server is running, else DuckDB (no server started for it)."""

from __future__ import annotations

import pytest

from platform_assets.config import parse_config
from platform_assets.sql_query import pick_engine
from resources.errors import DeltaportError


def config(tmp_path, **spark):
    return parse_config({"sources": [{"name": "dm", "format": "prostore", "signal_topic": "s", "backup_topic": "b"}],
                         "spark": spark, "state_dir": str(tmp_path / "state")}, str(tmp_path / "deltaport.yaml"))


def test_auto_is_duckdb_without_a_server_and_spark_with_one(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert pick_engine(config(tmp_path)) == "duckdb"
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir()), "no server started"
    assert pick_engine(config(tmp_path, remote="sc://spark.example:15002")) == "spark"
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert pick_engine(config(tmp_path)) == "spark"
    assert pick_engine(config(tmp_path), "duckdb") == "duckdb"
    with pytest.raises(DeltaportError, match="engine must be one of auto, duckdb, spark"):
        pick_engine(config(tmp_path), "trino")

"""Unsafe `lake:` combinations are refused when the config is read, naming the key
(platform_assets/lake_safety.py); the safe ones next to them load."""

from __future__ import annotations

import pytest

from platform_assets.config import ConfigError, parse_config

DM = {"name": "marketing", "signal_topic": "s", "backup_topic": "b"}


def _lake(**lake):
    return parse_config({"datamarts": [DM], "lake": lake}, "deltaport.yaml")


@pytest.mark.parametrize("warehouse", ["s3://bucket/lake", "s3a://bucket/lake", "S3://b/l", "gs://b/l",
                                       "abfss://c@acct.dfs.core.windows.net/l"])
def test_a_hadoop_catalog_on_object_storage_is_refused(warehouse):
    with pytest.raises(ConfigError) as err:
        _lake(type="hadoop", warehouse=warehouse)
    assert err.value.key_path == "lake.type"
    assert str(err.value).startswith("deltaport.yaml: config key `lake.type`: a hadoop catalog cannot live on object "
                                     "storage")
    assert "atomic rename" in str(err.value) and "type: rest, jdbc or hive" in str(err.value)


@pytest.mark.parametrize("lake", [
    {"type": "hadoop", "warehouse": "lake"},
    {"type": "hadoop", "warehouse": "file:/data/lake"},
    {"type": "hadoop", "warehouse": "hdfs://namenode/lake"},  # HDFS renames atomically
    {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "s3://bucket/lake"},
    {"type": "jdbc", "uri": "jdbc:postgresql://db/lake", "warehouse": "s3a://bucket/lake"},
])
def test_safe_combinations_load(lake):
    assert _lake(**lake).lake.warehouse == lake["warehouse"]


@pytest.mark.parametrize("key", ["s3.secret-access-key", "jdbc.password", "credential", "token", "s3.session-token",
                                 "client.secret-access-key", "gcs.oauth2.token"])
def test_a_secret_written_in_the_file_is_refused_naming_the_property(key):
    with pytest.raises(ConfigError) as err:
        _lake(type="rest", uri="http://c", properties={key: "hunter2-in-the-file"})
    assert err.value.key_path == f"lake.properties.{key}"
    assert "{env: NAME}" in str(err.value) and "hunter2" not in str(err.value)
    ok = _lake(type="rest", uri="http://c", properties={key: {"env": "LAKE_SECRET"}, "token-refresh-enabled": "false"})
    assert ok.lake.properties[key] == {"env": "LAKE_SECRET"}


@pytest.mark.parametrize("value", [{"env": ""}, {"env": 3}, {"env": "A", "default": "x"}, {"name": "A"}])
def test_a_malformed_env_reference_is_refused(value):
    with pytest.raises(ConfigError) as err:
        _lake(type="rest", uri="http://c", properties={"s3.access-key-id": value})
    assert err.value.key_path == "lake.properties.s3.access-key-id"

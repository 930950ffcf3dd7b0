"""deltaport.yaml: defaults serve the demo; a wrong config fails with one message naming the key."""

from __future__ import annotations

import pytest

from platform_assets.config import ConfigError, load_config, parse_config, resolve_secret

DM = {"name": "marketing", "signal_topic": "s", "backup_topic": "b"}


def test_the_shipped_config_loads_with_paths_relative_to_the_file(tmp_path):
    cfg = load_config("deltaport.yaml")
    assert [d.name for d in cfg.datamarts] == ["marketing", "sourcedb"]
    assert [(s.name, s.format) for s in cfg.streams] == [
        ("sales_qlik", "qlik"), ("shop_dataworks", "dataworks"), ("shop_datastream", "datastream")]
    assert cfg.lake.type == "hadoop" and cfg.resolve_path(cfg.lake.warehouse).name == "lake"
    (tmp_path / "x.yaml").write_text("datamarts: [{name: a, signal_topic: s, backup_topic: b}]\nstate_dir: st\n")
    assert load_config(tmp_path / "x.yaml").resolve_path("st") == tmp_path / "st"


@pytest.mark.parametrize("raw, key", [
    ({}, "sources"),
    ({"sources": [{"name": "q", "format": "qlik"}]}, "sources[0].topic"),
    ({"sources": [{"name": "q", "format": "maxwell", "topic": "t"}]}, "sources[0].format"),
    ({"sources": [{"name": "q", "format": "qlik", "topic": "t", "max_rows": 0}]}, "sources[0].max_rows"),
    ({"sources": [{"name": "q", "format": "datastream", "topic": "t", "lateness_seconds": -1}]},
     "sources[0].lateness_seconds"),
    ({"sources": [{"name": "q", "format": "qlik", "topic": "t", "signal_topic": "s"}]}, "sources[0].signal_topic"),
    ({"sources": [DM, {"name": "marketing", "format": "qlik", "topic": "t"}]}, "sources"),
    ({"sources": [{"name": "bad-name", "format": "qlik", "topic": "t"}]}, "sources"),
    ({"datamarts": [{"name": "a", "signal_topic": "s"}]}, "datamarts[0].backup_topic"),
    ({"datamarts": [DM, DM]}, "datamarts"),
    ({"datamarts": [DM], "kafka": {"bootstrap": "x"}}, "kafka.bootstrap"),
    ({"datamarts": [DM], "lake": {"type": "delta"}}, "lake.type"),
    ({"datamarts": [DM], "lake": {"type": "rest"}}, "lake.uri"),
    ({"datamarts": [DM], "sensor": {"interval_seconds": "often"}}, "sensor.interval_seconds"),
    ({"datamarts": [DM], "spark": {"conf": ["a"]}}, "spark.conf"),
    ({"datamarts": [DM], "spark": {"remote": "localhost:15002"}}, "spark.remote"),
    ({"datamarts": [DM], "spark": {"idle_timeout_minutes": -1}}, "spark.idle_timeout_minutes"),
    ({"datamarts": [DM], "lake": {"history_partition_deltas": -5}}, "lake.history_partition_deltas"),
    ({"datamarts": [DM], "sensor": {"partition_window": -1}}, "sensor.partition_window"),
    ({"datamarts": [DM], "sensor": {"partition_window": "all"}}, "sensor.partition_window"),
    ({"datamarts": [DM], "colour": "blue"}, "colour"),
])
def test_a_wrong_config_names_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "deltaport.yaml")
    assert err.value.key_path == key and f"`{key}`" in str(err.value) and "deltaport.yaml" in str(err.value)


def test_sources_of_every_format():
    cfg = parse_config({"sources": [
        {**DM, "format": "prostore"},
        {"name": "crm", "format": "qlik", "topic": "qlik.crm", "max_rows": 500},
        {"name": "shop", "format": "dataworks", "topic": "dw.shop", "idle_seconds": 0},
        {"name": "events", "format": "datastream", "topic": "ds.events", "lateness_seconds": 0},
    ]})
    assert [d.name for d in cfg.datamarts] == ["marketing"]
    assert [(s.name, s.format) for s in cfg.streams] == [("crm", "qlik"), ("shop", "dataworks"),
                                                          ("events", "datastream")]
    assert cfg.streams[0].max_rows == 500 and cfg.streams[0].max_seconds == 300.0
    assert cfg.streams[1].idle_seconds == 0 and cfg.streams[2].lateness_seconds == 0
    assert cfg.source_names == ["marketing", "crm", "shop", "events"]
    # The older `datamarts:` list and `sources:` together: both count.
    both = parse_config({"datamarts": [DM], "sources": [{"name": "crm", "format": "qlik", "topic": "t"}]})
    assert both.source_names == ["marketing", "crm"]


def test_a_datamart_without_signal_topic_is_backup_only():
    cfg = parse_config({"sources": [DM, {"name": "archive", "format": "prostore", "backup_topic": "b"}]})
    assert [d.backup_only for d in cfg.datamarts] == [False, True]
    assert cfg.datamarts[1].signal_topic is None


def test_a_missing_file_and_broken_yaml_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("datamarts: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_secrets_come_from_the_environment_when_used(monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", "s3cret")
    assert resolve_secret({"env": "KAFKA_PASSWORD"}) == "s3cret"
    assert resolve_secret("plain") == "plain"
    monkeypatch.delenv("KAFKA_PASSWORD")
    with pytest.raises(ConfigError, match="KAFKA_PASSWORD"):
        resolve_secret({"env": "KAFKA_PASSWORD"})


def test_the_embedded_servers_idle_timeout_defaults_to_an_hour_and_0_is_never():
    from platform_assets.engine import engine_for

    assert engine_for(parse_config({"datamarts": [DM]})).local_server().idle_timeout == 3600
    never = parse_config({"datamarts": [DM], "spark": {"idle_timeout_minutes": 0}})
    assert engine_for(never).local_server().idle_timeout == 0
    assert parse_config({"datamarts": [DM], "spark": {"idle_timeout_minutes": 2.5}}).spark.idle_timeout_minutes == 2.5


def test_history_tables_partition_in_spans_of_deltas_and_0_is_one_per_delta():
    from resources.lake.history_layout import history_partition, snapshot_of

    assert parse_config({"datamarts": [DM]}).lake.history_partition_deltas == 1000
    assert parse_config({"datamarts": [DM], "lake": {"history_partition_deltas": 0}}).lake.history_partition_deltas == 0
    assert history_partition(1000) == "truncate(1000, delta_num)" and history_partition(0) == "delta_num"
    assert snapshot_of("lake.sales_history.orders") == "lake.sales.orders"


def test_the_partition_window_defaults_to_two_thousand_and_zero_keeps_every_partition():
    assert parse_config({"datamarts": [DM]}).sensor.partition_window == 2_000
    assert parse_config({"datamarts": [DM], "sensor": {"partition_window": 0}}).sensor.partition_window == 0

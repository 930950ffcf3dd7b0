"""Lag you can see: a backup held back makes the source lag in deltas and seconds, the check
lag_within_bound fail and `deltaport status` say LATE; once the backup arrives and lands, all three
recover. Through `sync` (the sensor's code), a real broker, real Spark and Iceberg.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.cli.status_cmd import report
from platform_assets.config import parse_config
from platform_assets.lag import LAG_CHECK
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish

pytestmark = pytest.mark.integration

DM = "marketing"
HELD = 2  # its backup arrives only for the second sync
DELTAS = 4


def _latest(instance: dg.DagsterInstance):
    key = dg.AssetKey([DM, "snapshot"])
    observation = instance.fetch_observations(key, limit=1).records[0].asset_observation
    check = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, LAG_CHECK))
    return observation.metadata, check.event.asset_check_evaluation.passed


def test_a_held_backup_shows_as_lag_and_fails_the_check_until_it_lands(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=41, deltas=DELTAS, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"lag.signal.{os.getpid()}", BACKUP: f"lag.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    held = [m for m in sc.messages if m.role == BACKUP and m.note.startswith(f"{DM}:{HELD}:")]
    assert held, "the story must have a backup to hold back"
    publish([m for m in sc.messages if m not in held], kafka_bootstrap, topics)
    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "lag", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_lag_seconds": 60},
    }, str(tmp_path / "deltaport.yaml"))

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(HELD)]
        metadata, passed = _latest(instance)
        assert metadata["lag_deltas"].value == DELTAS - HELD  # closed, not landed: HELD and after it
        assert metadata["landed_through"].value == HELD - 1
        assert metadata["lag_seconds"].value > 60  # the emulator's deltas closed long before now
        assert passed is False
        lines, code = report(cfg, instance)
        assert code == 1 and lines == [line for line in lines if "LATE" in line and f"{DELTAS - HELD} deltas behind"
                                       in line and f"oldest: delta {HELD}" in line]

        publish(held, kafka_bootstrap, topics)
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok and second.landed() == [(DM, n) for n in range(HELD, DELTAS)]
        metadata, passed = _latest(instance)
        assert (metadata["lag_deltas"].value, metadata["lag_seconds"].value) == (0, 0.0)
        assert metadata["landed_through"].value == DELTAS - 1
        assert passed is True
        lines, code = report(cfg, instance)
        assert code == 0 and lines == [f"{DM}: landed through delta {DELTAS - 1}; up to date"]

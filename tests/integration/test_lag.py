"""Lag you can see: a backup held back makes the source lag in deltas and seconds, the check
lag_within_bound fail and `deltaport status` say LATE; once the backup arrives and lands, all three
recover. Deltas closed on the signal topic after the last `sync` (no tick has read them) make
`status` say LATE too, and exit 1, as the check's own execution says; with the broker out of
reach it says how old its knowledge is and exits 3. Through `sync` (the sensor's code), a real
broker, real Spark and Iceberg.

What the ticks leave in the instance stays bounded: 60 ticks of the sensor over the real broker
(recorded as the daemon and `sync` record them) report the lag when it changes, not per tick.
"""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from platform_assets.cli.status_cmd import report
from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.lag import LAG_CHECK
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.net import free_port
from resources.state.delta_marks import DeltaMarks
from resources.state.store import state_store

pytestmark = pytest.mark.integration

DM = "marketing"
HELD = 2  # its backup arrives only for the second sync
DELTAS = 4  # landed by the two syncs
LATER = 2  # deltas closed on the signal topic after the second sync, which no sync reads


def _latest(instance: dg.DagsterInstance):
    key = dg.AssetKey([DM, "snapshot"])
    observation = instance.fetch_observations(key, limit=1).records[0].asset_observation
    check = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, LAG_CHECK))
    return observation.metadata, check.event.asset_check_evaluation.passed


def test_a_held_backup_shows_as_lag_and_fails_the_check_until_it_lands(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=41, deltas=DELTAS + LATER, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"lag.signal.{os.getpid()}", BACKUP: f"lag.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    held = [m for m in sc.messages if m.role == BACKUP and m.note.startswith(f"{DM}:{HELD}:")]
    assert held, "the story must have a backup to hold back"
    signals = [m for m in sc.messages if m.role == SIGNAL]
    closes = [i for i, m in enumerate(signals) if m.note.endswith("DELTA_CLOSE")]
    later = signals[closes[DELTAS - 1] + 1:]  # the signal events of the deltas after DELTAS - 1
    later += [m for m in sc.messages if m.role == BACKUP and int(m.note.split(":")[1]) >= DELTAS]
    # Lag counts from when a delta became available in Kafka, not from the emulator's 2024 dates
    # (platform_assets/lag.py): a bound of 1 ms makes any wait late, and nothing else.
    published = time.time()
    publish([m for m in sc.messages if m not in held and m not in later], kafka_bootstrap, topics)
    cfg_dict = {
        "sources": [{"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "lag", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_lag_seconds": 0.001},
    }
    cfg = parse_config(cfg_dict, str(tmp_path / "deltaport.yaml"))

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(HELD)]
        metadata, passed = _latest(instance)
        assert metadata["lag_deltas"].value == DELTAS - HELD  # closed, not landed: HELD and after it
        assert metadata["landed_through"].value == HELD - 1
        # since delta 2's DELTA_CLOSE arrived, not since its deltaDate (February 2024)
        assert 0 < metadata["lag_seconds"].value <= time.time() - published + 1
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

        # Deltas close with no tick to read them (the daemon stopped, cron between syncs).
        publish([m for m in later if m.role == SIGNAL], kafka_bootstrap, topics)
        lines, code = report(cfg, instance)
        assert code == 1, lines
        assert lines[0].startswith(f"{DM}: landed through delta {DELTAS - 1}; {LATER} deltas behind "
                                   f"(oldest: delta {DELTAS}), ") and "LATE (bound 0 s)" in lines[0], lines
        lines, code = report(cfg, instance, max_lag_seconds=1e12)  # the bound from the command line
        assert code == 0 and "LATE" not in lines[0] and f"{LATER} deltas behind" in lines[0], lines
        checked = _execute_lag_check(cfg, instance)
        assert checked.passed is False and f"{LATER} deltas behind" in checked.description

        # The broker out of reach: the store's view, said to be old, and exit 3.
        away = parse_config({**cfg_dict, "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"}},
                            str(tmp_path / "deltaport.yaml"))
        lines, code = report(away, instance, timeout=3)
        assert code == 3, lines
        assert lines[0].startswith(f"{DM}: landed through delta {DELTAS - 1}; up to date as of the last read of its "
                                   "topics, ") and "could not be read now" in lines[0], lines


def _execute_lag_check(cfg, instance) -> dg.AssetCheckEvaluation:
    """The check lag_within_bound executed on its own, as from the UI."""
    from platform_assets.definitions import build_definitions

    defs = build_definitions(cfg)
    key = dg.AssetCheckKey(dg.AssetKey([DM, "snapshot"]), LAG_CHECK)
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_check_selection={key}, asset_selection=set())
    result = job.execute_in_process(instance=instance, raise_on_error=True)
    return result.get_asset_check_evaluations()[0]


def _reports(instance: dg.DagsterInstance) -> tuple[int, int]:
    """(lag observations, lag check evaluations) the instance holds."""
    key = dg.AssetKey([DM, "snapshot"])
    observations = instance.fetch_observations(key, limit=1000).records
    checks = instance.event_log_storage.get_asset_check_execution_history(dg.AssetCheckKey(key, LAG_CHECK), limit=1000)
    return len(observations), len(checks)


def test_the_lag_reports_grow_with_what_changed_not_with_the_ticks(kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=43, deltas=3, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"lag.ticks.signal.{os.getpid()}", BACKUP: f"lag.ticks.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    publish(sc.messages, kafka_bootstrap, topics)
    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap}, "lake": {"catalog": "ticks", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"), "sensor": {"max_lag_seconds": 0.001},  # any wait is late
    }, str(tmp_path / "deltaport.yaml"))
    defs = build_definitions(cfg)
    sensor = defs.resolve_sensor_def(f"{DM}_delta_close_sensor")
    marks = DeltaMarks(state_store(cfg.state_url("index")))

    def ticks(n: int, cursor: str | None) -> str | None:
        """`n` ticks, their events recorded as the daemon and `sync` record them; their runs not run."""
        for _ in range(n):
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                         resources=defs.resources) as ctx:
                result = sensor(ctx)
            for event in result.asset_events or []:
                instance.report_runless_asset_event(event)
            cursor = result.cursor if result.cursor is not None else cursor
        return cursor

    with dg.instance_for_test() as instance:
        cursor = ticks(30, None)  # the deltas are requested at once, then 29 idle ticks
        assert _reports(instance) == (1, 1)
        metadata, passed = _latest(instance)
        assert metadata["lag_deltas"].value == 3 and passed is False
        marks.landed(DM, 1)  # as the snapshot's step writes it when deltas 0-1 land
        ticks(30, cursor)
        assert _reports(instance) == (2, 2)
        metadata, _ = _latest(instance)
        assert (metadata["lag_deltas"].value, metadata["landed_through"].value) == (1, 1)

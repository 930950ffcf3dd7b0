"""The DELTA_CLOSE sensor is restart-safe: no event lost, no duplicate run, after a daemon
restart, a sensor (cursor) reset, or the signal topic's retention deleting old events.

Only sensor ticks here (real broker, real delta index, `dg.instance_for_test()`); landing the
requested runs is test_platform.py's business.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.deltas.requests import request_deltas
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic, watermarks

pytestmark = pytest.mark.integration


def ticks(defs, instance, dm, cursor, limit=30):
    """Tick until two ticks in a row request nothing; returns (deltas requested in order, cursor,
    last skip)."""
    sensor = defs.resolve_sensor_def(f"{dm}_delta_close_sensor")
    keys, idle, skip = [], 0, None
    for _ in range(limit):
        with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                     resources=defs.resources) as ctx:
            result = sensor(ctx)
        for req in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        keys += [n for r in result.run_requests for n in request_deltas(r)]
        cursor, skip = result.cursor, result.skip_reason
        idle = 0 if result.run_requests else idle + 1
        if idle >= 2:
            break
    return keys, cursor, skip


def test_restart_reset_and_retention_lose_nothing_and_duplicate_nothing(kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=23, deltas=6, datamarts=("marketing",),
                                       faults=Faults(duplicate_rate=0.1, lagging_deltas=(2,), lag=2)))
    topics = {SIGNAL: f"restart.signal.{os.getpid()}", BACKUP: f"restart.backup.{os.getpid()}"}
    create_topic(kafka_bootstrap, topics[SIGNAL])
    create_topic(kafka_bootstrap, topics[BACKUP])
    raw = {"datamarts": [{"name": "marketing", "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
           "kafka": {"bootstrap_servers": kafka_bootstrap}, "lake": {"catalog": "restart", "warehouse": str(tmp_path / "lake")},
           "state_dir": str(tmp_path / "state"), "sensor": {"max_messages_per_tick": 40}}
    half = len(sc.messages) // 2
    publish(sc.messages[:half], kafka_bootstrap, topics)
    with dg.instance_for_test() as instance:
        first, cursor, skip = ticks(build_definitions(parse_config(raw)), instance, "marketing", None)
        assert first == list(range(len(first)))

        # Retention deletes every signal event read so far, then the rest of the traffic arrives.
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        marks = watermarks(kafka_bootstrap, topics[SIGNAL])
        futures = admin.delete_records([TopicPartition(topics[SIGNAL], p, hi) for p, (_, hi) in marks.items()])
        for f in futures.values():
            f.result(timeout=30)
        assert all(lo == hi for lo, hi in watermarks(kafka_bootstrap, topics[SIGNAL]).values())
        publish(sc.messages[half:], kafka_bootstrap, topics)

        # A daemon restart: new definitions, resources and index objects; the same cursor and files.
        rest, cursor, skip = ticks(build_definitions(parse_config(raw)), instance, "marketing", cursor)
        assert first + rest == sorted(sc.truth["marketing"]), "no delta lost or twice"
        assert not ticks(build_definitions(parse_config(raw)), instance, "marketing", cursor)[0]

        # A sensor reset: the cursor is gone. No run has landed anything here, so every delta is
        # requested again, in order (a reset after runs resumes after them: test_platform), and
        # the dynamic partitions are not added twice.
        again, _, _ = ticks(build_definitions(parse_config(raw)), instance, "marketing", None)
        assert again == first + rest
        assert instance.get_dynamic_partitions("marketing_deltas") == sorted(
            f"{n:08d}" for n in sc.truth["marketing"])

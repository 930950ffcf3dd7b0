"""Emulator -> real Kafka -> decode: what comes back equals what was written.

Every column type, nulls and non-ASCII text travel through a real broker; the `inspect`
reader, fed by a real scan, finds every injected fault; the CLI commands work end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from resources.codecs.signal import decode_signal
from resources.errors import DecodeError
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.prostore.inspect import TopicInspector
from resources.kafka.admin import create_topic
from resources.kafka.scan import scan
from tests.support.replay import apply_increment, chosen_increments

pytestmark = pytest.mark.integration

FAULTS = Faults(duplicate_rate=0.05, lost_chunk_deltas=(1, 2), reexport_deltas=(2,), lagging_deltas=(3,),
                malformed=True)


@pytest.fixture(scope="module")
def emulated(kafka_bootstrap):
    """One emulated story with every fault, published once to a 3-partition backup topic."""
    cfg = EmulatorConfig(seed=21, deltas=6, streams=2, chunk_size=5, backup_partitions=3, signal_partitions=2,
                         faults=FAULTS)
    sc = build_scenario(cfg)
    topics = {SIGNAL: f"it.signal.{os.getpid()}", BACKUP: f"it.backup.{os.getpid()}"}
    create_topic(kafka_bootstrap, topics[SIGNAL], partitions=2)
    create_topic(kafka_bootstrap, topics[BACKUP], partitions=3)
    publish(sc.messages, kafka_bootstrap, topics)
    return sc, topics


def test_backup_messages_come_back_byte_for_byte_and_decode_to_the_truth(kafka_bootstrap, emulated):
    sc, topics = emulated
    got = list(scan(kafka_bootstrap, topics[BACKUP]))
    sent = [m for m in sc.messages if m.role == BACKUP]
    assert sorted((m.partition, m.key, m.value) for m in got) == sorted((m.partition, m.key, m.value) for m in sent)
    parts, report = chosen_increments([(m.partition, m.offset, m.key, m.value) for m in got])
    for dm in sc.config.datamarts:
        assert report.datamarts[dm].incomplete == [1]
        state = {}
        for n in sorted(sc.truth[dm]):
            if n == 1:  # lost for good: continue from the truth, as a user would after a re-export
                state = sc.truth[dm][1]
                continue
            state = apply_increment(state, parts[(dm, n)])
            assert state == sc.truth[dm][n], f"{dm} delta {n}"


def test_signal_events_come_back_in_order_per_datamart(kafka_bootstrap, emulated):
    sc, topics = emulated
    def decodable(messages):
        for m in messages:
            try:
                yield decode_signal(m.key, m.value)
            except DecodeError:
                continue

    sent = list(decodable(m for m in sc.messages if m.role == SIGNAL))
    got = list(decodable(scan(kafka_bootstrap, topics[SIGNAL])))
    for dm in sc.config.datamarts:
        expect = [e for e in sent if e.datamart == dm]
        mine = [e for e in got if e.datamart == dm]
        assert mine == expect  # one datamart -> one partition -> its order is kept


def test_inspect_finds_every_injected_fault(kafka_bootstrap, emulated):
    sc, topics = emulated
    reports = {}
    for role in (BACKUP, SIGNAL):
        inspector = TopicInspector(topics[role])
        for msg in scan(kafka_bootstrap, topics[role]):
            inspector.add(msg)
        reports[role] = inspector.report()
    backup, signal = reports[BACKUP], reports[SIGNAL]
    assert backup.errors_by_kind == {"bad_avro_key": 1, "bad_container_file": 1, "schema_mismatch": 1}
    assert signal.errors_by_kind == {"bad_json": 2, "not_a_signal_key": 1}
    for err in backup.errors + signal.errors:
        assert err.location.topic in topics.values() and err.location.offset is not None
        assert f"offset {err.location.offset}" in str(err)
    dups = {role: sum(1 for kind in sc.injected["duplicate"] if kind[0] == role) for role in (BACKUP, SIGNAL)}
    assert backup.duplicates["backup"] >= dups[BACKUP]
    assert signal.duplicates["signal"] == dups[SIGNAL]
    assert signal.signal["marketing"].unknown_events == {"DELTA_MERGE": 1}
    for dm in sc.config.datamarts:
        r = backup.backup.datamarts[dm]
        assert r.incomplete == [1] and r.deltas[2].complete and len(r.deltas[2].increments) == 2
        assert sorted(signal.signal[dm].closed) == sorted(sc.truth[dm])
        assert sorted(signal.signal[dm].cancelled) == sorted(set(sc.cancelled[dm]))
        for n, state in sc.truth[dm].items():
            if n == 1:
                continue
            changed = {}
            for ch in sc.increments[dm][n]:
                changed[ch.table] = changed.get(ch.table, 0) + 1
            assert {t: c for (d, k, t), c in backup.rows.items() if d == dm and k == n} == changed


def test_cli_emulate_then_inspect(kafka_bootstrap, tmp_path):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    topic = f"cli.backup.{os.getpid()}"
    cli = [sys.executable, "-m", "platform_assets.cli"]
    out = subprocess.run(cli + ["emulate", "--signal-topic", f"cli.signal.{os.getpid()}", "--backup-topic", topic,
                                "--deltas", "4", "--faults", "lost-chunk,malformed", "--truth", str(tmp_path / "t.json")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    truth = json.loads((tmp_path / "t.json").read_text())
    assert sorted(truth["datamarts"]["marketing"]["deltas"]) == ["0", "1", "2", "3"]
    res = subprocess.run(cli + ["inspect", "--topic", topic, "--json"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    marketing = next(d for d in doc["backup"]["datamarts"] if d["datamart"] == "marketing")
    assert marketing["incomplete"] == [1, 2] and marketing["missing_deltas"] == []
    assert doc["bad_messages_by_kind"] == {"bad_avro_key": 1, "bad_container_file": 1, "schema_mismatch": 1}
    text = subprocess.run(cli + ["inspect", "--topic", topic, "--datamart", "sourcedb"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "backup of datamart sourcedb" in text.stdout and "marketing" not in text.stdout.split("bad messages")[0]
    assert "INCOMPLETE" in text.stdout


def test_inspect_of_a_missing_topic_is_a_clear_error(kafka_bootstrap):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    res = subprocess.run([sys.executable, "-m", "platform_assets.cli", "inspect", "--topic", "no.such.topic",
                          "--timeout", "5"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "no.such.topic" in res.stderr

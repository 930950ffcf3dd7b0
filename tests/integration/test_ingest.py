"""Kafka -> delta index, against a real broker, with the emulator as the oracle."""

from __future__ import annotations

import pytest

from resources.prostore.delta_index import CLOSED, DeltaIndex
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.read_plan import plan_ranges
from resources.prostore.ingest import IngestError, ingest_topic
from resources.kafka.admin import create_topic

pytestmark = pytest.mark.integration


def test_plan_ranges_shares_the_budget_and_resumes_from_retention():
    ranges, left = plan_ranges({0: (0, 10), 1: (5, 8), 2: (0, 0)}, {0: 4, 1: 2}, budget=5)
    assert sum(hi - lo for lo, hi in ranges.values()) == 5 and left == 4
    assert ranges[1][0] == 5  # progress 2 was deleted by retention: resume at the low watermark
    assert ranges[0][0] == 4


@pytest.fixture(scope="module")
def story(kafka_bootstrap):
    cfg = EmulatorConfig(seed=5, deltas=6, streams=2, chunk_size=4, backup_partitions=2, signal_partitions=2,
                         faults=Faults(duplicate_rate=0.1, lost_chunk_deltas=(1,), lagging_deltas=(3,),
                                       malformed=True))
    sc = build_scenario(cfg)
    topics = {SIGNAL: "ingest.signal", BACKUP: "ingest.backup"}
    create_topic(kafka_bootstrap, topics[SIGNAL], partitions=2)
    create_topic(kafka_bootstrap, topics[BACKUP], partitions=2)
    publish(sc.messages, kafka_bootstrap, topics)
    return sc, topics


def test_ingest_in_small_bounded_steps_indexes_every_delta(kafka_bootstrap, story, tmp_path):
    sc, topics = story
    index = DeltaIndex(tmp_path / "index.sqlite")
    calls = 0
    for role, kind in ((SIGNAL, "signal"), (BACKUP, "backup")):
        while True:
            res = ingest_topic(kafka_bootstrap, topics[role], index, kind, max_messages=37)
            calls += 1
            assert res.read <= 37
            if res.remaining == 0:
                break
    assert calls > 4
    for dm in sc.config.datamarts:
        closed = index.deltas(dm, CLOSED)
        assert sorted(closed) == sorted(sc.truth[dm])
        for n in closed:
            report, refs = index.chosen_messages(topics[BACKUP], dm, n)
            if n == 1:
                assert not report.complete and refs == []
                continue
            assert report.complete, (dm, n, report)
            tables = {r.table_name for r in refs if r.table_name}
            assert tables == {ch.table for ch in sc.increments[dm][n]}
            changed: dict[str, int] = {}
            for ch in sc.increments[dm][n]:
                changed[ch.table] = changed.get(ch.table, 0) + 1
            assert index.writes_for_increment(dm, n) == changed
    kinds = sorted(q["kind"] for q in index.quarantine())
    assert kinds == ["bad_avro_key", "bad_container_file", "bad_json", "bad_json", "not_a_signal_key"]
    for q in index.quarantine():
        assert q["topic"] in topics.values() and q["offset"] >= 0
    # The truncated copy's key was readable: it counts for the delta it names, the bad key for none.
    truncated = next(m.note for m in sc.messages if m.note.startswith("backup:truncated_container of "))
    dm, delta = truncated.split(" of ")[1].split(":")[:2]
    bad = index.delta_quarantine(topics[BACKUP], dm, 0, max(sc.truth[dm]))
    assert [q["kind"] for qs in bad.values() for q in qs] == ["bad_container_file"] and list(bad) == [int(delta)]


def test_ingesting_again_changes_nothing(kafka_bootstrap, story, tmp_path):
    sc, topics = story
    index = DeltaIndex(tmp_path / "index.sqlite")
    ingest_topic(kafka_bootstrap, topics[BACKUP], index, "backup")
    ingest_topic(kafka_bootstrap, topics[SIGNAL], index, "signal")
    before = (index.deltas("marketing"), index.chosen_messages(topics[BACKUP], "marketing", 2))
    again = DeltaIndex(tmp_path / "index.sqlite")  # a restart: a new process, the same file
    for topic, kind in ((topics[BACKUP], "backup"), (topics[SIGNAL], "signal")):
        assert ingest_topic(kafka_bootstrap, topic, again, kind).read == 0
    with again._transaction() as db:  # a cursor reset: progress forgotten, everything re-read
        db.execute("DELETE FROM progress")
    res = ingest_topic(kafka_bootstrap, topics[SIGNAL], again, "signal")
    assert res.read > 0 and res.indexed == 0
    ingest_topic(kafka_bootstrap, topics[BACKUP], again, "backup")
    assert (again.deltas("marketing"), again.chosen_messages(topics[BACKUP], "marketing", 2)) == before


def test_a_recreated_topic_is_refused_not_misread(kafka_bootstrap, tmp_path):
    index = DeltaIndex(tmp_path / "index.sqlite")
    index.write_batch("recreated.topic", next_offsets={0: 50})  # as if 50 messages had been read
    create_topic(kafka_bootstrap, "recreated.topic")
    with pytest.raises(IngestError, match="re-created"):
        ingest_topic(kafka_bootstrap, "recreated.topic", index, "backup")

"""resources/changestream/inspect.py without a broker: a Qlik topic read from its first message
primes the decoder with the metadata messages it meets (no change is bad for want of a schema),
and garbage is counted by kind without bound while only the first texts are kept."""

from __future__ import annotations

from resources.changestream.inspect import MAX_ERRORS, StreamInspector, render
from resources.emulator.qlik import QlikConfig, build_qlik_story
from resources.kafka.scan import RawMessage


def _raw(messages):
    return [RawMessage("t", m.partition, i, 0, m.key, m.value) for i, m in enumerate(messages)]


def test_a_qlik_topic_reads_clean_from_its_first_message():
    story = build_qlik_story(QlikConfig(seed=3, transactions=10, duplicate_rate=0.0))
    inspector = StreamInspector("t", "qlik")
    for msg in _raw(story.messages):
        inspector.add(msg)
    report = inspector.report()
    assert report.bad_messages == 0 and report.messages == len(story.messages)
    assert report.schema_messages > 0 and sum(c.upserts + c.deletes for c in report.tables.values()) > 0
    assert "bad messages: 0" in render(report, 1, 0.1)


def test_garbage_is_counted_without_bound_and_its_first_texts_kept():
    inspector = StreamInspector("t", "debezium")
    for i in range(MAX_ERRORS + 15):
        inspector.add(RawMessage("t", 0, i, 0, b'{"id": 1}', b"\xff not json"))
    report = inspector.report()
    assert report.bad_messages == MAX_ERRORS + 15 and len(report.errors) == MAX_ERRORS
    assert "topic 't' partition 0 offset 0" in report.errors[0]

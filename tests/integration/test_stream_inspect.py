"""`deltaport inspect --format <stream format>` (issue 59: a Debezium topic's bad input reported as
`inspect` reports a Prostore topic's): a Debezium story with three bad messages (a malformed
envelope, an unknown op, a missing key) written to a real broker; the report counts each table's
changes, the transactions and tombstones as the story's own notes say them (not the codec), and
locates each bad message at its offset. Read-only: the topic is read again and reports the same."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from platform_assets.cli import main
from resources.formats.debezium.emulator import DEBEZIUM, DebeziumConfig, build_debezium_story
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from tests.integration.test_debezium import bad_messages
from tests.integration.test_streams_e2e import with_bad_messages

pytestmark = pytest.mark.integration


def test_inspect_reports_a_debezium_topic_and_locates_its_bad_messages(kafka_bootstrap, capsys):
    story = build_debezium_story(DebeziumConfig(seed=5))  # bad JSON at offset 15, an unknown op at 40
    messages, bad = with_bad_messages(story, DEBEZIUM, bad_messages(story))
    # A missing key: a change whose key is gone (the codec cannot say which row it is).
    change = next(i for i, m in enumerate(messages) if m.note.startswith("c:") and i > 45)
    messages[change] = type(messages[change])(DEBEZIUM, 0, None, messages[change].value, "missing key")
    topic = "inspect.debezium"
    create_topic(kafka_bootstrap, topic)
    publish(messages, kafka_bootstrap, {DEBEZIUM: topic})

    notes = [m.note for m in messages if m.key != b"bad" and m.note != "missing key"]  # the good ones
    want = Counter()
    for note in notes:
        op, _, rest = note.partition(":")
        table = rest.split(":")[0]
        if op in ("c", "r", "u"):
            want[table, "upserts"] += 1
        elif op == "d":
            want[table, "deletes"] += 1
    reports = []
    for _ in range(2):  # read-only: a second look reports the same
        assert main(["inspect", "--topic", topic, "--format", DEBEZIUM, "--json", "--bootstrap-servers", kafka_bootstrap]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    doc = reports[0]
    assert {k: v for k, v in doc.items() if k != "seconds"} == {k: v for k, v in reports[1].items() if k != "seconds"}
    assert doc["messages"] == len(messages)
    assert doc["tombstones"] == sum(n.startswith("tombstone:") for n in notes)
    got = Counter()
    for name, counts in doc["tables"].items():
        for kind in ("upserts", "deletes"):
            got[name.rsplit(".", 1)[-1], kind] += counts[kind]
    assert +got == +want, (doc["errors_by_kind"], doc["tables"])
    assert doc["transactions"].get("begin") == sum(n.startswith("BEGIN:") for n in notes)
    assert doc["transactions"].get("end") == sum(n.startswith("END:") for n in notes)
    assert doc["errors_by_kind"] == {"bad_json": 1, "debezium_unknown_op": 1, "debezium_missing_key": 1}
    located = "\n".join(doc["errors"])
    for offset in (15, 40, change):
        assert f"topic {topic!r} partition 0 offset {offset}" in located, located
    # The text form says the same, one line per bad message.
    assert main(["inspect", "--topic", topic, "--format", DEBEZIUM, "--bootstrap-servers", kafka_bootstrap]) == 0
    text = capsys.readouterr().out
    assert "bad messages: 3 (bad_json 1, debezium_missing_key 1, debezium_unknown_op 1)" in text

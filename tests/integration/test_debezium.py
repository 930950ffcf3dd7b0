"""Debezium end to end: emulator -> real Kafka -> sealing sensor -> runs -> Iceberg, read by both engines.

The Debezium story (snapshot reads op=r, inserts, updates with before images, deletes with their
tombstones, transactions over two tables, a schema change, duplicates re-sent by a connector
restart) plus three bad messages (a malformed envelope, an unknown op, a missing key) goes to one
routed topic in two halves, through the same sensor, job and assets as the other formats
(tests/integration/test_streams_e2e.py), with a platform restart between the halves. Every
sealed delta, read as of itself by Spark and by PyIceberg, equals the story's truth; the bad
messages are quarantined with their topic, partition and offset; the final state is the story's.
"""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

from platform_assets.definitions import ledger_resource
from platform_assets.deltas.requests import request_deltas
from resources.emulator.stream_oracle import final_truth, same_rows
from resources.formats.debezium.emulator import DEBEZIUM, DebeziumConfig, build_debezium_story
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.cdc import cdc_rows_as_of
from resources.lake.layout import LakeLayout
from tests.integration.test_streams_e2e import SOURCE, platform, tick, with_bad_messages
from tests.support.read_engines import every_sealed_delta_equals_the_truth

pytestmark = pytest.mark.integration


def bad_messages(story):
    change = next(m for m in story.messages if m.note.startswith("u:"))
    doc = json.loads(change.value)
    unknown = json.dumps({**doc, "payload": {**doc["payload"], "op": "x"}}).encode()
    return [(15, b'{"schema": {"type": "struct"}, "payload": {"op": "c", ', "bad_json"),
            (40, unknown, "debezium_unknown_op")]


def test_a_debezium_story_lands_equal_to_its_truth_on_both_engines(spark_remote, kafka_bootstrap, tmp_path):
    story = build_debezium_story(DebeziumConfig(seed=11, transactions=24))
    messages, expected = with_bad_messages(story, DEBEZIUM, bad_messages(story))
    # A change with no message key (a table without a primary key): quarantined, located.
    keyless = next(m for m in story.messages if m.note.startswith("c:"))
    messages.insert(60, type(keyless)(DEBEZIUM, 0, None, keyless.value, "keyless"))
    expected = {(0, o + (o >= 60)): k for (_, o), k in expected.items()} | {(0, 60): "debezium_missing_key"}
    topic = f"pg.shop.routed.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    half = len(messages) // 2
    publish(messages[:half], kafka_bootstrap, {DEBEZIUM: topic})
    landed: list[int] = []
    cursor = None
    with dg.instance_for_test() as instance:
        for life, idle in ((0, 3600), (1, 0)):
            cfg, defs = platform(kafka_bootstrap, tmp_path, DEBEZIUM, topic, {"max_rows": 10, "max_seconds": 3600}, idle)
            job = defs.resolve_job_def(f"{SOURCE}_delta_job")
            quiet = 0
            while quiet < 2:
                result = tick(defs, instance, cursor)
                cursor = result.cursor
                quiet = 0 if result.run_requests else quiet + 1
                for req in result.run_requests:
                    deltas = request_deltas(req)
                    assert deltas[0] == len(landed), (req.run_key, landed)
                    assert job.execute_in_process(partition_key=req.partition_key, instance=instance,
                                                  tags=req.tags).success
                    landed += deltas
            if life == 0:
                assert landed, "the first half seals and lands deltas"
                publish(messages[half:], kafka_bootstrap, {DEBEZIUM: topic})
        spark = defs.resources["spark"].get_session()
        ledger = ledger_resource(cfg).get()
        assert landed == [d.delta_num for d in ledger.sealed_deltas(SOURCE)] and len(landed) >= 4, landed
        compared, rows = every_sealed_delta_equals_the_truth(story, DEBEZIUM, cfg, spark, SOURCE, kafka_bootstrap)
        print(f"debezium: {len(landed)} deltas landed, {compared} compared on both engines ({rows} rows)")
        assert compared >= 3
        quarantined = ledger.quarantine(SOURCE)
        assert {(q["partition"], q["offset"]): q["kind"] for q in quarantined} == expected
        assert all(q["topic"] == topic for q in quarantined)
        layout = LakeLayout(cfg.lake.catalog)
        for table, want in final_truth(DEBEZIUM, story).items():
            assert same_rows(cdc_rows_as_of(spark, layout, SOURCE, table, landed[-1]), want), f"final {table}"
        # The schema change landed: the customers table has the column added mid-stream.
        assert any(r.get("email") for r in cdc_rows_as_of(spark, layout, SOURCE, "public_customers", landed[-1]))

"""Kafka -> Arrow -> Spark for one table of a delta, on the driver and in executor tasks.

An emulated story (every column type, nulls, non-ASCII text, two streams over two partitions)
is published to a real broker. The refs of each (datamart, delta, table) are built here from a
scan and the keys, independently of the delta index. Both read paths must give the rows of the
fastavro reference (`iter_rows`) for every table; the executor path must really read in Spark
tasks (several partitions, no consumer on the driver); a truncated value must fail naming its
topic, partition and offset, on both paths.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from pyspark.sql import functions as F
from confluent_kafka import Producer

import resources.kafka.scan as scan_module
from resources.codecs.backup import MESSAGE_TYPE_DATA, decode_backup_key, iter_rows
from resources.codecs.types import spark_value
from resources.prostore.delta_index import MessageRef
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.errors import BadContainerFileError, Location
from resources.kafka.admin import create_topic
from resources.kafka.scan import ScanError, scan
from resources.spark.kafka_reader import (
    KafkaReadError,
    fetch_table_arrow,
    spark_table_changes,
    table_changes,
    task_errors,
)

pytestmark = pytest.mark.integration

CONFIG = EmulatorConfig(seed=3, deltas=3, streams=2, chunk_size=3, backup_partitions=2)


@pytest.fixture(scope="module")
def workers(spark):
    """The session whose server runs the read tasks: its Python workers run this venv's
    interpreter (the embedded server starts them with it), so they import deltaport's codecs."""
    return spark


@pytest.fixture(scope="module")
def story(kafka_bootstrap):
    """The scenario published once; per (datamart, delta, table): refs, values by ref, columns."""
    assert CONFIG.ddl_at_delta is None or CONFIG.ddl_at_delta >= CONFIG.deltas  # one DDL per table
    sc = build_scenario(CONFIG)
    run = uuid.uuid4().hex[:8]
    topics = {SIGNAL: f"it.kr.signal.{run}", BACKUP: f"it.kr.backup.{run}"}
    create_topic(kafka_bootstrap, topics[SIGNAL], partitions=1)
    create_topic(kafka_bootstrap, topics[BACKUP], partitions=CONFIG.backup_partitions)
    publish(sc.messages, kafka_bootstrap, topics)
    tables: dict[tuple, dict] = defaultdict(lambda: {"refs": [], "values": {}})
    for m in scan(kafka_bootstrap, topics[BACKUP]):
        key = decode_backup_key(m.key)
        if key.message_type != MESSAGE_TYPE_DATA:
            continue
        entry = tables[(key.datamart, key.delta_num, key.table_name)]
        ref = MessageRef(m.partition, m.offset, key.table_name, key.message_type, key.stream_number,
                         key.chunk_number)
        entry["refs"].append(ref)
        entry["values"][ref] = m.value
        entry["columns"] = sc.databases[key.datamart].tables[key.table_name].columns
    return topics[BACKUP], dict(tables)


def expected_rows(entry: dict) -> list[dict]:
    """The fastavro reference, as the reader's rows: TIME in µs, provenance added."""
    columns = entry["columns"]
    out = []
    for ref in sorted(entry["refs"], key=lambda r: (r.stream_number, r.chunk_number)):
        for row in iter_rows(entry["values"][ref], columns):
            got = {c.name: spark_value(c, row.get(c.name)) for c in columns}
            got.update(sys_op=row["sys_op"], _kafka_partition=ref.partition, _kafka_offset=ref.offset)
            out.append(got)
    return out


def ordered(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["_kafka_partition"], r["_kafka_offset"], repr(sorted(r.items()))))


def test_every_table_reads_the_same_on_the_driver_and_in_tasks(kafka_bootstrap, workers, story):
    topic, tables = story
    assert ("sourcedb", 1, "table1_adqm") in tables and len(tables) >= 6
    timings = {"driver": 0.0, "executor": 0.0}
    for (dm, delta, table), entry in sorted(tables.items()):
        expect = expected_rows(entry)
        assert expect, f"{dm}.{table} delta {delta} has rows"
        started = time.monotonic()
        arrow = fetch_table_arrow(kafka_bootstrap, topic, entry["refs"], entry["columns"])
        via_driver = table_changes(workers, kafka_bootstrap, topic, entry["refs"], entry["columns"],
                                   value_bytes=1).collect()
        timings["driver"] += time.monotonic() - started
        started = time.monotonic()
        with task_errors():
            via_tasks = spark_table_changes(workers, kafka_bootstrap, topic, entry["refs"], entry["columns"],
                                            max_task_messages=2).collect()
        timings["executor"] += time.monotonic() - started
        # the driver path keeps (stream, chunk) order, rows within a chunk in file order
        assert arrow.to_pylist() == expect, f"{dm}.{table} delta {delta}"
        assert [r.asDict() for r in via_driver] == expect, f"{dm}.{table} delta {delta}"
        assert ordered([r.asDict() for r in via_tasks]) == ordered(expect), f"{dm}.{table} delta {delta}"
    print(f"\n{len(tables)} tables: driver path {timings['driver']:.2f} s, executor path {timings['executor']:.2f} s")


def test_executor_path_reads_in_tasks_and_opens_no_consumer_on_the_driver(kafka_bootstrap, workers, story,
                                                                          monkeypatch):
    topic, tables = story
    entry = tables[("sourcedb", 1, "table1_adqm")]
    opened = []
    real = scan_module.Consumer
    monkeypatch.setattr(scan_module, "Consumer", lambda conf: opened.append(conf) or real(conf))

    df = table_changes(workers, kafka_bootstrap, topic, entry["refs"], entry["columns"],
                       value_bytes=10**9, driver_max_bytes=1, max_task_messages=2)
    with task_errors():
        tasks = df.select(F.spark_partition_id().alias("task")).distinct().count()
    assert tasks == -(-len(entry["refs"]) // 2) > 1  # 2 refs per task at most
    with task_errors():
        rows = [r.asDict() for r in df.collect()]
    assert ordered(rows) == ordered(expected_rows(entry))
    assert opened == []  # every consumer lived in a Python worker, none in this process

    table_changes(workers, kafka_bootstrap, topic, entry["refs"], entry["columns"], value_bytes=1)
    assert len(opened) >= 1  # the counter does see the driver path's consumer


def test_a_truncated_value_fails_naming_topic_partition_and_offset(kafka_bootstrap, workers, story, topic_name):
    topic, tables = story
    entry = tables[("sourcedb", 1, "table1_adqm")]
    good_ref = entry["refs"][0]
    good = entry["values"][good_ref]
    create_topic(kafka_bootstrap, topic_name, partitions=1)
    delivered = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in (good, good[:-10]):  # cut inside the last block, before its sync marker
        producer.produce(topic_name, value=value, partition=0,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered] == [None, None]
    refs = [MessageRef(0, off, good_ref.table_name, MESSAGE_TYPE_DATA, 1, n + 1)
            for n, (_, off) in enumerate(delivered)]
    bad = Location(topic_name, 0, delivered[1][1])

    with pytest.raises(BadContainerFileError) as on_driver:
        fetch_table_arrow(kafka_bootstrap, topic_name, refs, entry["columns"])
    assert on_driver.value.location == bad and on_driver.value.part == "value"
    assert f"topic {topic_name!r} partition 0 offset {bad.offset}" in str(on_driver.value)

    df = spark_table_changes(workers, kafka_bootstrap, topic_name, refs, entry["columns"], max_task_messages=1)
    with pytest.raises(BadContainerFileError) as in_task, task_errors():
        df.collect()
    assert in_task.value.location == bad and in_task.value.part == "value"
    assert str(in_task.value) == str(on_driver.value)


def test_an_offset_the_topic_never_held_fails_on_both_paths(kafka_bootstrap, workers, story, topic_name):
    topic, tables = story
    entry = tables[("sourcedb", 1, "table1_adqm")]
    create_topic(kafka_bootstrap, topic_name, partitions=1)
    refs = [MessageRef(0, 7, entry["refs"][0].table_name, MESSAGE_TYPE_DATA, 1, 1)]  # an empty topic

    with pytest.raises(ScanError, match="no message for 2 s"):
        fetch_table_arrow(kafka_bootstrap, topic_name, refs, entry["columns"], timeout=2)
    df = spark_table_changes(workers, kafka_bootstrap, topic_name, refs, entry["columns"], timeout=2)
    with pytest.raises(KafkaReadError, match=f"ScanError: topic {topic_name!r}: no message for 2 s"), task_errors():
        df.collect()

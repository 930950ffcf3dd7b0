"""The real Kafka broker (resources/kafka/broker.py) and the admin helpers, end to end."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from resources.kafka import broker
from resources.kafka.admin import KafkaAdminError, create_topic, delete_topic, topic_partitions, watermarks
from resources.kafka.broker import BrokerError, EmbeddedKafka

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, messages: list[tuple[int | None, bytes | None, bytes | None]]) -> None:
    """Produce (partition, key, value) triples and wait until every one is acknowledged."""
    failures: list[str] = []

    def on_delivery(err, msg):  # noqa: ANN001 - librdkafka callback
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for partition, key, value in messages:
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery, **kwargs)
    assert producer.flush(30) == 0, "messages still unacknowledged after 30 s"
    assert not failures, failures


def _consume_assigned(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float = 30):
    """Read `expected` messages from the start of the given partitions (no consumer group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


NON_ASCII = [
    ("clé-1".encode(), "värde ✓ 日本語".encode()),
    ("ключ-2".encode(), "Ωμέγα — emoji 🚀".encode()),
    (b"\x00\xffraw-key", b"\x00\x01\xfe\xffnot utf-8 at all"),
    (b"k4", b""),
]


def test_produce_and_consume_bytes_single_partition(kafka_bootstrap: str, topic_name: str) -> None:
    assert create_topic(kafka_bootstrap, topic_name) is True
    assert topic_partitions(kafka_bootstrap, topic_name, timeout=10) == [0]
    assert watermarks(kafka_bootstrap, topic_name, timeout=10) == {0: (0, 0)}

    _produce(kafka_bootstrap, topic_name, [(None, k, v) for k, v in NON_ASCII])

    got = _consume_assigned(kafka_bootstrap, topic_name, [0], expected=len(NON_ASCII))
    assert got == [(0, i, k, v) for i, (k, v) in enumerate(NON_ASCII)]
    assert got[0][2].decode() == "clé-1" and got[1][3].decode() == "Ωμέγα — emoji 🚀"
    assert watermarks(kafka_bootstrap, topic_name, timeout=10) == {0: (0, len(NON_ASCII))}


def test_multi_partition_topic_with_consumer_group(kafka_bootstrap: str, topic_name: str) -> None:
    counts = {0: 3, 1: 0, 2: 5}
    assert create_topic(kafka_bootstrap, topic_name, partitions=3, config={"retention.ms": "-1"}) is True
    assert topic_partitions(kafka_bootstrap, topic_name, timeout=10) == [0, 1, 2]

    sent = [
        (p, f"p{p}-schlüssel-{i}".encode(), f"p{p}:{i}:żółć".encode()) for p, n in counts.items() for i in range(n)
    ]
    sent.append((1, None, "no key, partition 1".encode()))  # a null key is fine too
    _produce(kafka_bootstrap, topic_name, sent)
    expected_counts = {0: 3, 1: 1, 2: 5}
    assert watermarks(kafka_bootstrap, topic_name, timeout=10) == {p: (0, n) for p, n in expected_counts.items()}

    # Through a real consumer group: exercises the group coordinator (__consumer_offsets, RF 1).
    group = f"{topic_name}-group"
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic_name])
        got: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
        for p in got:
            expected = [(i, k, v) for i, (pp, k, v) in enumerate(m for m in sent if m[0] == p)]
            assert got[p] == expected, f"partition {p}"
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic_name, p) for p in counts], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == expected_counts
    finally:
        consumer.close()


def test_admin_helpers_are_idempotent_and_name_the_topic(kafka_bootstrap: str, topic_name: str) -> None:
    assert create_topic(kafka_bootstrap, topic_name, partitions=2) is True
    assert create_topic(kafka_bootstrap, topic_name, partitions=2) is False  # existing is fine
    assert delete_topic(kafka_bootstrap, topic_name) is True
    assert delete_topic(kafka_bootstrap, topic_name) is False
    with pytest.raises(KafkaAdminError, match=topic_name):
        delete_topic(kafka_bootstrap, topic_name, missing_ok=False)
    with pytest.raises(KafkaAdminError, match=f"{topic_name}.*does not exist"):
        watermarks(kafka_bootstrap, topic_name, timeout=10)
    with pytest.raises(KafkaAdminError, match=topic_name):
        create_topic(kafka_bootstrap, topic_name, partitions=0, timeout=10)


def test_auto_create_is_off(kafka_bootstrap: str, topic_name: str) -> None:
    with pytest.raises(KafkaAdminError, match="does not exist"):
        topic_partitions(kafka_bootstrap, topic_name, timeout=10)
    # asking for its metadata did not create it
    with pytest.raises(KafkaAdminError, match="does not exist"):
        topic_partitions(kafka_bootstrap, topic_name, timeout=10)


def test_port_in_use_raises_broker_error_with_log_lines() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        kafka = EmbeddedKafka(broker_port=port, start_timeout=25)
        with pytest.raises(BrokerError) as info:
            kafka.start()
        elapsed = time.monotonic() - started
    message = str(info.value)
    assert "exited early" in message
    assert f"127.0.0.1:{port}" in message and "Address already in use" in message
    assert "server.log" in message and message.count("\n") > 5  # log lines, not just a summary
    assert not kafka.running and kafka.data_dir is None  # stopped and cleaned up
    assert elapsed < 30


def test_invalid_property_raises_broker_error_with_log_lines() -> None:
    kafka = EmbeddedKafka(properties={"num.partitions": "many"}, start_timeout=25)
    with pytest.raises(BrokerError) as info:
        kafka.start()
    message = str(info.value)
    assert "num.partitions" in message and "many" in message
    assert "format.log" in message or "server.log" in message
    assert not kafka.running


def test_jars_are_cached_and_cache_dir_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started = time.monotonic()
    first = broker.ensure_kafka_jars()
    again = broker.ensure_kafka_jars()
    assert first == again and (first / broker.MARKER_NAME).is_file()
    assert any(first.glob(f"kafka_2.13-{broker.KAFKA_VERSION}.jar"))
    if time.monotonic() - started > 60:  # the first call may have resolved; the second must not
        pytest.fail("jar resolution took more than a minute")
    t = time.monotonic()
    broker.ensure_kafka_jars()
    assert time.monotonic() - t < 1.0

    monkeypatch.setenv("DELTAPORT_CACHE_DIR", str(tmp_path))
    assert broker.kafka_cache_dir() == tmp_path / f"kafka-{broker.KAFKA_VERSION}"


def test_kafka_bootstrap_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker.example:9092")
    with broker.kafka_bootstrap() as bootstrap:
        assert bootstrap == "broker.example:9092"


def test_maven_failure_is_a_broker_error_with_maven_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad_pom = tmp_path / "pom.xml"
    bad_pom.write_text("<project><modelVersion>4.0.0</modelVersion><broken></project>\n")
    monkeypatch.setattr(broker, "POM_PATH", bad_pom)
    with pytest.raises(BrokerError, match=r"(?s)Maven failed.*pom\.xml"):
        broker.ensure_kafka_jars(tmp_path / "jars")
    assert not (tmp_path / "jars" / broker.MARKER_NAME).exists()


def test_a_restarted_broker_keeps_its_address_and_messages(tmp_path: Path) -> None:
    """`restart()` (the fault suite's broker restart): killed and started again on the same ports
    and storage, the broker still holds what was written, and takes new messages. Its class
    archive (resources/class_archive.py; `make jars` makes it) is mapped, or, when there is none
    yet, dumped and published at its orderly stop."""
    with EmbeddedKafka(work_dir=tmp_path) as kafka:
        archive = kafka.class_archive
        assert archive is not None
        if archive.final.is_file():
            assert f"-XX:SharedArchiveFile={archive.final}" in _args(kafka._proc.pid)
            assert str(archive.final) in Path(f"/proc/{kafka._proc.pid}/maps").read_text()
        address, topic = kafka.bootstrap_servers, "restarted"
        create_topic(address, topic)
        _produce(address, topic, [(None, b"k1", b"before")])
        kafka.restart(crash=True)
        assert kafka.bootstrap_servers == address
        _produce(address, topic, [(None, b"k2", b"after")])
        got = _consume_assigned(address, topic, [0], expected=2)
        assert [(o, v) for _, o, _, v in got] == [(0, b"before"), (1, b"after")]
    assert archive.final.is_file() and not archive.part.exists()


def _args(pid: int) -> list[str]:
    return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]

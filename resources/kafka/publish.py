"""Produce the emulator's messages to Kafka, in order, and wait until every one is acknowledged.

Partitions are chosen by the emulator (never by key hash), so the layout of a topic is part of
the deterministic scenario. Duplicates are the scenario's own, so the producer is not idempotent
on purpose. A delivery failure raises `PublishError` naming the topic and partition.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from confluent_kafka import KafkaException, Producer

from resources.errors import DeltaportError


class PublishError(DeltaportError):
    """A message could not be delivered to Kafka."""


class Outgoing(Protocol):
    """What `publish` sends: a message with its topic's role and its partition chosen by the
    writer (the emulator's `resources.emulator.outgoing.Outgoing` is one). Declared here so the
    Kafka client layer needs nothing from the emulator above it."""

    role: str
    partition: int
    key: bytes | None
    value: bytes | None


def publish(messages: Iterable[Outgoing], bootstrap: str, topics: Mapping[str, str], *,
            producer_config: Mapping[str, object] | None = None, timeout: float = 60.0,
            pace: Callable[[Outgoing], None] | None = None,
            on_progress: Callable[[int], None] | None = None) -> Counter:
    """Send `messages` to `topics` ({role: topic name}); returns messages sent per topic.

    `pace(msg)` is called after each message is handed to the producer (the demo sleeps there
    after a DELTA_CLOSE, so deltas close over time).
    """
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": False,
            "message.max.bytes": 16 * 1024 * 1024, "message.timeout.ms": int(timeout * 1000)}
    conf.update(producer_config or {})
    producer = Producer(conf)
    failures: list[str] = []
    sent: Counter = Counter()

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(f"topic {msg.topic()!r} partition {msg.partition()}: {err.str()}")

    try:
        for i, m in enumerate(messages, start=1):
            topic = topics[m.role]
            while True:
                try:
                    producer.produce(topic, value=m.value, key=m.key, partition=m.partition, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.5)  # local queue full: let deliveries drain, then retry
            producer.poll(0)
            sent[topic] += 1
            if pace is not None:
                producer.flush(timeout)
                pace(m)
            if on_progress is not None and i % 100 == 0:
                on_progress(i)
        deadline = time.monotonic() + timeout
        while producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                raise PublishError(f"{len(producer)} messages still undelivered after {timeout:.0f} s")
    except KafkaException as exc:
        raise PublishError(str(exc)) from exc
    if failures:
        raise PublishError(f"{len(failures)} messages not delivered; first: {failures[0]}")
    return sent

"""Bounded reads of a Kafka topic with confluent-kafka: every message up to the end offsets
seen when the read began, partition by partition, then stop.

A scan never commits offsets and never joins a consumer group's rebalance (partitions are
assigned by hand), so it can run beside the platform's own consumers without disturbing them.
Messages come out as plain `RawMessage`s; every `msg.error()` is checked; the consumer is
closed in `finally`. Offset ranges let a reader fetch exactly one delta's messages: the cost
is O(messages in the ranges), not O(topic).

A secured cluster's refusals are errors of their own, raised at once rather than after the
timeout (librdkafka only retries a refused login): `KafkaAuthError` (SASL credentials refused)
and `KafkaAccessError` (an ACL denies the topic). They name the broker, the user and the topic,
never the password. librdkafka's own log lines go to the ``resources.kafka.scan`` logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from resources.errors import DeltaportError
from resources.kafka.admin import retry_transient


_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())


class ScanError(DeltaportError):
    """The topic could not be read (unknown topic, broker unreachable, timeout)."""


class KafkaAuthError(ScanError):
    """The broker refused the client's SASL credentials."""


class KafkaAccessError(ScanError):
    """The broker's ACLs deny this client the topic."""


@dataclass(frozen=True)
class RawMessage:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


class _Refusals:
    """librdkafka's error callback: keeps a refused login, which librdkafka would retry forever."""

    def __init__(self, bootstrap: str, config: Mapping[str, object]):
        self.bootstrap, self.user = bootstrap, config.get("sasl.username")
        self.mechanism = config.get("sasl.mechanism", "SASL")
        self.refused: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self.refused = error

    def check(self) -> None:
        """Raise `KafkaAuthError` if the broker refused the login (as of the callbacks served so far:
        librdkafka serves them in `poll`)."""
        if self.refused is not None:
            raise KafkaAuthError(f"Kafka at {self.bootstrap} refused the credentials of user {self.user!r} "
                                 f"({self.mechanism}): {self.refused.str()}")

    def denied(self, topic: str, error: KafkaError) -> KafkaAccessError:
        return KafkaAccessError(f"Kafka at {self.bootstrap}: user {self.user!r} may not read topic {topic!r} "
                                f"({error.name()}: grant it READ and DESCRIBE on the topic)")


_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def _consumer(bootstrap: str, config: Mapping[str, object] | None) -> tuple[Consumer, _Refusals]:
    refusals = _Refusals(bootstrap, config or {})
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "deltaport-scan",  # required by librdkafka; never committed to
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # Retention may have deleted the start of a range: resume from the earliest offset left.
        "auto.offset.reset": "earliest",
        "socket.timeout.ms": 10_000,
        "logger": _log,
    }
    conf.update(config or {})
    conf["error_cb"] = refusals
    return Consumer(conf), refusals


def _metadata(consumer: Consumer, refusals: _Refusals, topic: str, timeout: float):
    """The topic's metadata, asked in short slices so a refused login ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.list_topics(topic, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
        except KafkaException:
            consumer.poll(0)  # serves the error callback; nothing is assigned yet, so no message is taken
            refusals.check()
            if time.monotonic() >= deadline:
                raise


def topic_ranges(bootstrap: str, topic: str, *, config: Mapping[str, object] | None = None,
                 timeout: float = 15.0) -> dict[int, tuple[int, int]]:
    """{partition: (low, high)} watermarks: the offsets a full scan would read now."""
    consumer, refusals = _consumer(bootstrap, config)
    try:
        meta = _metadata(consumer, refusals, topic, timeout)
        tmeta = meta.topics.get(topic)
        if tmeta is not None and tmeta.error is not None and tmeta.error.code() in _DENIED:
            raise refusals.denied(topic, tmeta.error)
        if tmeta is None or tmeta.error is not None:
            reason = tmeta.error if tmeta is not None else "no metadata"
            raise ScanError(f"topic {topic!r} cannot be read: {reason}")
        deadline = time.monotonic() + timeout
        return {p: _watermarks(consumer, TopicPartition(topic, p), deadline) for p in sorted(tmeta.partitions)}
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() in _DENIED:
            raise refusals.denied(topic, error) from None
        raise ScanError(f"topic {topic!r} cannot be read: {exc}") from exc
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """A partition's watermarks, retrying transient errors until `deadline` (a topic created a
    moment ago can answer "not leader for partition": seen right after `deltaport export`
    created its topic)."""
    return retry_transient(lambda: consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic())),
                           deadline)


def scan(bootstrap: str, topic: str, ranges: Mapping[int, tuple[int, int]] | None = None, *,
         config: Mapping[str, object] | None = None, timeout: float = 30.0,
         on_progress: Callable[[int, int], None] | None = None) -> Iterator[RawMessage]:
    """Yield the messages of `topic` in `ranges` ({partition: (start, end)}, end exclusive;
    default: the whole topic as it is now), partition order kept within each partition.

    `timeout` bounds the wait for the next message; a broker that stops answering raises
    ScanError rather than hanging. `on_progress(done, total)` is called as messages arrive.
    """
    if ranges is None:
        ranges = topic_ranges(bootstrap, topic, config=config, timeout=timeout)
    todo = {p: (lo, hi) for p, (lo, hi) in ranges.items() if hi > lo}
    total = sum(hi - lo for lo, hi in todo.values())
    done = 0
    if not todo:
        return
    consumer, refusals = _consumer(bootstrap, config)
    try:
        consumer.assign([TopicPartition(topic, p, lo if lo >= 0 else OFFSET_BEGINNING) for p, (lo, _) in todo.items()])
        remaining = dict(todo)
        last_seen = time.monotonic()
        while remaining:
            msg = consumer.poll(1.0)
            if msg is None:
                refusals.check()  # the poll above served the error callback
                if time.monotonic() - last_seen > timeout:
                    raise ScanError(f"topic {topic!r}: no message for {timeout:.0f} s, still to read "
                                    f"{ {p: r for p, r in remaining.items()} }")
                continue
            last_seen = time.monotonic()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    # Retention may have removed what we expected: the partition is simply done.
                    if msg.partition() in remaining and msg.offset() >= remaining[msg.partition()][1]:
                        remaining.pop(msg.partition())
                    continue
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    # librdkafka looks up the coordinator of `group.id`, which a scan never uses
                    # (it assigns, never commits): a user without group ACLs reads all the same.
                    continue
                if err.code() in _DENIED:
                    raise refusals.denied(topic, err)
                raise ScanError(f"topic {topic!r} partition {msg.partition()}: {err.str()}")
            p, off = msg.partition(), msg.offset()
            if p not in remaining or off >= remaining[p][1] or off < remaining[p][0]:
                continue  # outside the range (e.g. after an offset reset to the earliest)
            _, ts = msg.timestamp()
            yield RawMessage(topic, p, off, ts, msg.key(), msg.value())
            done += 1
            if on_progress is not None and (done % 200 == 0 or done == total):
                on_progress(done, total)
            if off + 1 >= remaining[p][1]:
                remaining.pop(p)
    except KafkaException as exc:
        raise ScanError(f"topic {topic!r}: {exc}") from exc
    finally:
        consumer.close()

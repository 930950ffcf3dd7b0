"""Small confluent-kafka admin helpers: create/delete a topic, list its partitions, read its
watermarks.

Every call takes a `timeout` (seconds) that bounds the whole call, and every failure is a
`KafkaAdminError` naming the topic and the operation. Nothing here imports Dagster. The
librdkafka client logs go to the ``resources.kafka.admin`` logger (never straight to stderr).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from resources.errors import DeltaportError

T = TypeVar("T")

__all__ = ["KafkaAdminError", "create_topic", "delete_topic", "topic_partitions", "watermarks"]

_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())


class KafkaAdminError(DeltaportError):
    """A Kafka admin operation on a topic failed (or timed out)."""

    def __init__(self, operation: str, topic: str, reason: str):
        self.operation = operation
        self.topic = topic
        self.reason = reason
        super().__init__(f"{operation} on topic {topic!r} failed: {reason}")


def _admin(bootstrap: str, timeout: float, config: Mapping[str, object] | None = None) -> AdminClient:
    """An admin client; `config`: the cluster's client settings (security.protocol, sasl.*, ...)."""
    ms = str(max(1000, int(timeout * 1000)))
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": ms,
            "socket.connection.setup.timeout.ms": ms,
            "logger": _log,
            **(config or {}),
        }
    )


def _remaining(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code()
    return None


def _partition_leaders(admin: AdminClient, topic: str, timeout: float) -> dict[int, int] | None:
    """{partition: leader} as the cluster's metadata has it now; None if the topic is unknown."""
    md = admin.list_topics(topic=topic, timeout=timeout)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None and tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    if tmd.error is not None:
        raise KafkaException(tmd.error)
    return {p.id: p.leader for p in tmd.partitions.values()}


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30,
    *,
    replication_factor: int = 1,
    client_config: Mapping[str, object] | None = None,
) -> bool:
    """Create topic `name` and wait until each of its partitions has a leader.

    Idempotent: if the topic already exists, that is fine (its partition count and config are
    left as they are). Returns True if this call created the topic, False if it existed.
    """
    op = "create_topic"
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap, timeout, client_config)
    new = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={str(k): str(v) for k, v in (config or {}).items()},
    )
    created = True
    try:
        futures = admin.create_topics([new], request_timeout=timeout, operation_timeout=timeout)
        futures[name].result(timeout=_remaining(deadline))
    except KafkaException as exc:
        if _error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
            raise KafkaAdminError(op, name, str(exc.args[0] if exc.args else exc)) from exc
        created = False
    except TimeoutError as exc:
        raise KafkaAdminError(op, name, f"no answer within {timeout} s from {bootstrap}") from exc
    except ValueError as exc:  # invalid arguments (checked client-side)
        raise KafkaAdminError(op, name, str(exc)) from exc

    # The controller has accepted the topic; wait until metadata shows every partition led,
    # so a producer that starts right after this call does not see "unknown topic".
    last = "topic not in metadata yet"
    while time.monotonic() < deadline:
        try:
            leaders = _partition_leaders(admin, name, _remaining(deadline))
        except KafkaException as exc:
            last = str(exc.args[0] if exc.args else exc)
        else:
            if leaders and (not created or len(leaders) == partitions) and all(v >= 0 for v in leaders.values()):
                return created
            last = f"partition leaders so far: {leaders}"
        time.sleep(0.05)
    raise KafkaAdminError(op, name, f"topic not ready within {timeout} s ({last})")


def delete_topic(bootstrap: str, name: str, timeout: float = 30, *, missing_ok: bool = True,
                 client_config: Mapping[str, object] | None = None) -> bool:
    """Delete topic `name`. Returns True if deleted, False if it did not exist (when
    `missing_ok`; otherwise a missing topic is a `KafkaAdminError`)."""
    op = "delete_topic"
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap, timeout, client_config)
    try:
        futures = admin.delete_topics([name], request_timeout=timeout, operation_timeout=timeout)
        futures[name].result(timeout=_remaining(deadline))
    except KafkaException as exc:
        if missing_ok and _error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise KafkaAdminError(op, name, str(exc.args[0] if exc.args else exc)) from exc
    except TimeoutError as exc:
        raise KafkaAdminError(op, name, f"no answer within {timeout} s from {bootstrap}") from exc
    return True


def _existing_leaders(admin: AdminClient, op: str, topic: str, timeout: float) -> dict[int, int]:
    """{partition: leader} of a topic that must exist; KafkaAdminError naming it otherwise."""
    try:
        leaders = _partition_leaders(admin, topic, timeout)
    except KafkaException as exc:
        raise KafkaAdminError(op, topic, str(exc.args[0] if exc.args else exc)) from exc
    if leaders is None:
        raise KafkaAdminError(op, topic, "topic does not exist")
    return leaders


def topic_partitions(bootstrap: str, topic: str, timeout: float = 30, *,
                     client_config: Mapping[str, object] | None = None) -> list[int]:
    """The topic's partition ids, sorted. A missing topic is a `KafkaAdminError`."""
    op = "topic_partitions"
    admin = _admin(bootstrap, timeout, client_config)
    leaders = _existing_leaders(admin, op, topic, timeout)
    return sorted(leaders)


# What a partition answers while its leader takes over (a topic created a moment ago): worth a retry.
_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}


def transient(exc: KafkaException) -> bool:
    """Whether a Kafka error is worth retrying: retriable by librdkafka's word, or a partition
    whose leadership is settling (seen in CI: "not leader for partition" right after a topic
    was created and its leader shown in metadata)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in _TRANSIENT)


def retry_transient(call: Callable[[], T], deadline: float) -> T:
    """`call()`, tried again every 0.2 s while it fails with a `transient` error and `deadline`
    (time.monotonic) is ahead."""
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not transient(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def watermarks(bootstrap: str, topic: str, timeout: float = 30, *,
               client_config: Mapping[str, object] | None = None) -> dict[int, tuple[int, int]]:
    """``{partition: (low, high)}``: the earliest offset still stored and the high watermark
    (the offset the next message will get) of each partition. A missing topic is an error."""
    op = "watermarks"
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap, timeout, client_config)
    leaders = _existing_leaders(admin, op, topic, timeout)
    out: dict[int, list[int]] = {p: [-1, -1] for p in leaders}
    for slot, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
        request = {TopicPartition(topic, p): spec for p in leaders}

        def offsets(request=request) -> dict[int, int]:
            futures = admin.list_offsets(request, request_timeout=_remaining(deadline))
            return {tp.partition: fut.result(timeout=_remaining(deadline)).offset for tp, fut in futures.items()}

        try:
            for part, offset in retry_transient(offsets, deadline).items():
                out[part][slot] = offset
        except KafkaException as exc:
            raise KafkaAdminError(op, topic, str(exc.args[0] if exc.args else exc)) from exc
        except TimeoutError as exc:
            raise KafkaAdminError(op, topic, f"no answer within {timeout} s from {bootstrap}") from exc
    return {p: (lo, hi) for p, (lo, hi) in sorted(out.items())}

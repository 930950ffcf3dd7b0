"""Typed errors for bad input, shared by every codec and reader.

Codecs are pure: they see bytes, not Kafka, so they raise a `DecodeError` with no location.
Whoever read the bytes (a topic scanner, a file reader) pins the location on with `located()`,
so the message a user finally sees names the topic, partition and offset (or file and line)
of the bad message. Nothing here imports Dagster or a Kafka client.
"""

from __future__ import annotations

from dataclasses import dataclass


class DeltaportError(Exception):
    """Root of every error deltaport raises on purpose."""


@dataclass(frozen=True)
class Location:
    """Where a bad message was found: a Kafka coordinate, or a file and line."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.file is not None:
            return f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"topic {self.topic!r} partition {self.partition} offset {self.offset}"


class BadInputError(DeltaportError):
    """The input itself is wrong, not the platform nor the engine: reading the same messages
    again fails the same way. A range run of deltas that fails with one is cut by `sync`, so
    the deltas before the bad one still land (platform_assets/sync.py)."""


class DecodeError(BadInputError):
    """A message (or part of one) could not be decoded; `kind` is a stable short code
    used to count and quarantine bad messages by cause."""

    kind = "decode"

    def __init__(self, reason: str, *, location: Location | None = None, part: str | None = None):
        self.reason = reason
        self.location = location
        self.part = part  # "key" or "value", when known
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" at {self.location}" if self.location else ""
        part = f" ({self.part})" if self.part else ""
        return f"{self.kind}{part}{where}: {self.reason}"

    def located(self, location: Location, part: str | None = None) -> "DecodeError":
        """Return this error with its location (and message part) filled in."""
        self.location = location
        if part is not None:
            self.part = part
        self.args = (self._render(),)
        return self


@dataclass(frozen=True)
class BadMessage:
    """A message that failed to decode, as a quarantine keeps it (the delta index's, the ledger's)."""

    partition: int
    offset: int
    part: str | None
    kind: str
    reason: str
    # The delta its key names, when the key decoded and its value did not (Prostore's backup).
    datamart: str | None = None
    delta_num: int | None = None

    @classmethod
    def of(cls, err: DecodeError, *, datamart: str | None = None, delta_num: int | None = None) -> "BadMessage":
        """The quarantine record of a located error (`DecodeError.located` with a Kafka coordinate)."""
        return cls(err.location.partition, err.location.offset, err.part, err.kind, err.reason, datamart, delta_num)


class BadJsonError(DecodeError):
    kind = "bad_json"


class NotASignalKeyError(DecodeError):
    kind = "not_a_signal_key"


class BadSignalValueError(DecodeError):
    kind = "bad_signal_value"


class BadAvroKeyError(DecodeError):
    kind = "bad_avro_key"


class BadKeyNumberError(BadAvroKeyError):
    """A key claims a number no writer can send (`resources.codecs.limits`): a chunk, stream or
    delta number, or a date, out of bounds. Counted apart from keys that are not Avro at all."""

    kind = "bad_key_number"


class BadContainerFileError(DecodeError):
    """The value is not a readable Avro Object Container File (truncated, corrupt, not Avro)."""

    kind = "bad_container_file"


class SchemaMismatchError(DecodeError):
    """A value's writer schema does not fit the table's DDL from the changelog."""

    kind = "schema_mismatch"


class MissingKeyColumnError(SchemaMismatchError):
    """A table-data value's writer schema lacks a primary-key column of the table: its rows
    cannot be keyed (each would have a NULL key), so they can never be applied to a snapshot."""

    kind = "missing_key_column"


class DdlParseError(BadInputError):
    """A changelog DDL statement could not be parsed."""

    def __init__(self, reason: str, query: str):
        self.reason = reason
        self.query = query
        super().__init__(f"cannot parse DDL ({reason}): {query[:200]}")

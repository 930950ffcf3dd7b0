"""A message the emulator wants produced: topic role, partition, key and value bytes."""

from __future__ import annotations

from dataclasses import dataclass

SIGNAL = "signal"
BACKUP = "backup"


@dataclass(frozen=True)
class Outgoing:
    role: str  # SIGNAL or BACKUP: which configured topic it goes to
    partition: int
    key: bytes | None
    value: bytes | None
    note: str = ""  # what this message is, for logs and fault bookkeeping

"""Prostore's FOR SYSTEM_TIME forms as WHERE clauses on a table's versions (pure; no engine).

A table's versions are the union `H` of two Iceberg tables (docs/design-history-and-growth.md):
- the snapshot table `lake.<src>.<t>`: the current versions, each with `sys_from` (the delta that
  wrote it; null for a row landed before the lake kept history) and `sys_from_date`;
- the history table `lake.<src>_history.<t>`: the closed versions, with `sys_from`, `sys_to`
  (the last delta in which the version was current), `sys_op` (1 when a delete closed it, else
  0), `sys_from_date`, `sys_close_date` (the close time of delta `sys_to + 1`, the one that
  closed it) and `delta_num` (= `sys_to + 1`, the partition: a re-run of delta N replaces it).
In `H` a current version has `sys_to` null and `sys_op` 0, as in Prostore.

Each form's clause is the rewrite Prostore's own code makes (docs/prostore-system-time.md), in
the subset of SQL that Spark SQL, Trino, DuckDB and PyIceberg's `row_filter` all parse, so every
engine gets the same answer from the same text:
- `AS OF DELTA_NUM n`: versions current at the end of delta n, one per live key;
- `STARTED IN (a, b)`: versions that began in deltas a..b (a key changed twice gives two rows;
  a delete starts nothing);
- `FINISHED IN (a, b)`: versions that a delete in deltas a..b ended, with their last values
  (a version replaced by an update is not "finished" in Prostore's sense).
`AS OF 'timestamp'` is `AS OF DELTA_NUM` of the last delta closed at or before the time, chosen
by the caller from the close times it knows (`delta_at`).
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

from resources.errors import DeltaportError

SYSTEM_COLUMNS = ("sys_from", "sys_to", "sys_op")
# A snapshot table's property: the first delta whose closed versions its history holds (set by
# resources/lake/prostore_history.py `mark_history_start`; absent when no history is kept).
HISTORY_FROM_PROPERTY = "deltaport.history-from"
# A change stream's snapshot row that is a version (not a tombstone; the history holds none).
LIVE = "_tombstone IS NULL OR _tombstone = false"


@dataclass(frozen=True)
class AsOfDelta:
    delta: int

    def where(self) -> str:
        n = int(self.delta)
        return f"(sys_from IS NULL OR sys_from <= {n}) AND (sys_to IS NULL OR sys_to >= {n})"

    def needs_current(self) -> bool:
        return True

    def current_where(self) -> str:
        """The clause on the snapshot table alone (its versions are current: `sys_to` null)."""
        return f"sys_from IS NULL OR sys_from <= {int(self.delta)}"

    def history_from(self) -> int:
        """The lowest history partition (closing delta) that can hold an answer."""
        return int(self.delta) + 1


@dataclass(frozen=True)
class StartedIn:
    first: int
    last: int

    def where(self) -> str:
        return f"sys_from >= {int(self.first)} AND sys_from <= {int(self.last)}"

    def needs_current(self) -> bool:
        return True

    def current_where(self) -> str:
        return self.where()

    def history_from(self) -> int:
        return int(self.first) + 1  # a version that began in `first` closes at `first + 1` at the earliest


@dataclass(frozen=True)
class FinishedIn:
    first: int
    last: int

    def where(self) -> str:
        return f"sys_to >= {int(self.first) - 1} AND sys_to <= {int(self.last) - 1} AND sys_op = 1"

    def needs_current(self) -> bool:
        return False  # a current version has finished nothing

    def current_where(self) -> str:
        return "FALSE"

    def history_from(self) -> int:
        return int(self.first)


Form = AsOfDelta | StartedIn | FinishedIn


def covers(start: int | None, form: Form) -> bool:
    """Whether a history complete from delta `start` (None: not kept) answers `form` exactly: as
    of n needs every version closed after n (n >= start - 1); STARTED / FINISHED IN (a, b) needs
    every version begun or closed from a on (a >= start)."""
    if start is None:
        return False
    if isinstance(form, AsOfDelta):
        return form.delta >= start - 1
    return form.first >= start


class HistoryNotKeptError(DeltaportError):
    """The lake holds no exact history for the deltas a form asks about."""


def check_covered(source: str, table: str, start: int | None, form: Form) -> None:
    """`HistoryNotKeptError` unless a history complete from `start` answers `form` exactly: a
    reader answers exactly or not at all, never with fewer versions than the form selects."""
    if not covers(start, form):
        raise HistoryNotKeptError(
            f"{source}.{table}: the lake keeps its history from delta {start} on; {form} asks about earlier "
            f"deltas" if start is not None else
            f"{source}.{table}: the lake keeps no history for this table (history: false, or not landed since)")


def history_where(form: Form) -> str:
    """The clause on the history table alone: the form's, plus the partitions that can hold an
    answer (so an engine prunes the history's older partitions by their `delta_num`)."""
    return f"delta_num >= {form.history_from()} AND {form.where()}"


def parse_range(text: str, *, flag: str) -> tuple[int, int]:
    """'A,B' (or 'A' alone) as the pair of deltas of STARTED IN / FINISHED IN; A <= B."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not all(p.lstrip("-").isdigit() and len(p) <= 19 for p in parts):
        raise ValueError(f"{flag} takes two delta numbers A,B, got {text!r}")
    first, last = int(parts[0]), int(parts[1])
    if first < 0 or last < first:
        raise ValueError(f"{flag} takes deltas 0 <= A <= B, got {text!r}")
    return first, last


def delta_at(close_times: Mapping[int, dt.datetime], when: dt.datetime) -> int | None:
    """The last delta closed at or before `when` (Prostore's GET_DELTA_BY_DATETIME: inclusive), or
    None when every delta closed after it. `close_times`: {delta: its close time, naive UTC}."""
    ordered = sorted(close_times.items(), key=lambda kv: (kv[1], kv[0]))
    i = bisect_right([t for _, t in ordered], when)
    return ordered[i - 1][0] if i else None

"""Increment completeness of a Prostore backup topic, computed from message keys alone.

Flow: a topic scanner decodes each message's key (`BackupKey`) and feeds it, with the message's
Kafka partition, offset and timestamp, to `IncrementLedger.add`, in any order and as often as it
likes (the scan may be resumed); `report()` then says, per datamart and delta, which export runs
(incrementIds) are there, which are complete, why the others are not, and which one to read.

Guarantees:
- Pure and streaming: no Kafka, no values. Memory is O(distinct keys): a repeated key (Kafka
  retries, `--kafkaRetries`) is counted as a duplicate and otherwise ignored.
- A delta's CHOSEN increment is the latest complete one, never a union of two runs: the latest is
  the one whose last message (greatest Kafka timestamp, then greatest (partition, offset)) is
  greatest, then the greatest incrementId. A delta with no complete increment has none.
- Completeness (a project decision, the seed is not explicit): every stream 1..streamTotal is
  whole under one of two numberings, because the seed says chunk numbers count "all messages of
  the stream" without saying whether per stream or per (stream, table):
  (A) per stream: its chunk numbers over all tables and the changelog run 1..k without a hole and
      the message with chunk k has isLastChunk;
  (B) per (stream, table): each group's chunk numbers run 1..k_g without a hole and the stream has
      an isLastChunk message that is the highest chunk of its group.
  Also: exactly one streamTotal and one deltaDate per increment, and a changelog message (the seed
  says every increment carries the changelog). Anything else is reported as a reason.
- Missing deltas are those absent between the first and the last delta present for a datamart,
  as the `readonly` check of RESTORE_FROM_KAFKA lists them; incomplete deltas are listed apart.
- Bounded whatever the keys claim: missing deltas, missing streams and holes are ranges
  (first, last) computed from the numbers present (`resources.prostore.ranges`), never by walking
  up to a claimed number, so a key saying chunk 2^63 - 1 or streamTotal 2^63 - 1 costs one
  message like any other; reasons print at most `ranges.SHOWN` ranges and conflicts each. (The
  codec refuses numbers no writer can send, `resources.codecs.limits`; this holds beyond them.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, BackupKey
from resources.prostore.ranges import SHOWN, Range, gaps, render, spans

CHANGELOG_LABEL = "changelog"  # group label of the changelog messages (tableName null)


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IncrementReport:
    """One export run's share of one delta: (datamart, deltaNum, incrementId)."""

    increment_id: str
    complete: bool
    stream_total: int  # the greatest seen, when the messages disagree (then a reason says so)
    delta_date: int  # microseconds since the epoch; the smallest seen, when they disagree
    messages: int  # distinct keys
    duplicates: int  # messages whose key was already seen
    tables: list[str]  # data tables seen, sorted
    missing_streams: list[Range]  # (first, last) ranges of stream numbers
    holes: dict[str, list[Range]]  # "stream 1" or "stream 1 / table t" -> missing chunk ranges
    reasons: list[str]  # empty when complete
    offsets: dict[int, tuple[int, int]]  # partition -> (first, last) offset, duplicates included
    last_timestamp_ms: int

    def to_dict(self) -> dict:
        out = asdict(self)
        out["offsets"] = {str(p): [first, last] for p, (first, last) in self.offsets.items()}
        return out


@dataclass(frozen=True)
class DeltaReport:
    delta_num: int
    delta_date: int | None  # of the chosen increment, else of the latest one
    increments: list[IncrementReport]  # oldest first
    chosen: str | None  # incrementId of the latest complete increment

    @property
    def complete(self) -> bool:
        return self.chosen is not None

    @property
    def chosen_increment(self) -> IncrementReport | None:
        return next((i for i in self.increments if i.increment_id == self.chosen), None)

    def to_dict(self) -> dict:
        return {
            "delta_num": self.delta_num,
            "delta_date": self.delta_date,
            "complete": self.complete,
            "chosen": self.chosen,
            "increments": [i.to_dict() for i in self.increments],
        }


@dataclass(frozen=True)
class DatamartReport:
    datamart: str
    deltas: dict[int, DeltaReport]  # by delta number, ascending
    missing_deltas: list[Range]  # (first, last) ranges absent between the first and the last present

    @property
    def present(self) -> list[int]:
        return list(self.deltas)

    @property
    def complete(self) -> list[int]:
        return [n for n, d in self.deltas.items() if d.complete]

    @property
    def incomplete(self) -> list[int]:
        return [n for n, d in self.deltas.items() if not d.complete]

    def to_dict(self) -> dict:
        return {
            "datamart": self.datamart,
            "present": self.present,
            "complete": self.complete,
            "incomplete": self.incomplete,
            "missing_deltas": self.missing_deltas,
            "deltas": [d.to_dict() for d in self.deltas.values()],
        }


@dataclass(frozen=True)
class TopicReport:
    datamarts: dict[str, DatamartReport]  # by name, ascending

    def to_dict(self) -> dict:
        return {"datamarts": [d.to_dict() for d in self.datamarts.values()]}


# ---------------------------------------------------------------------------------------------
# Accumulation
# ---------------------------------------------------------------------------------------------


@dataclass
class _Increment:
    """What the ledger keeps of one increment: the distinct keys, folded, and where they were."""

    seen: set[tuple] = field(default_factory=set)
    # stream -> table (None = changelog) -> chunk number -> isLastChunk
    chunks: dict[int, dict[str | None, dict[int, bool]]] = field(default_factory=dict)
    conflicts: set[str] = field(default_factory=set)
    stream_totals: set[int] = field(default_factory=set)
    delta_dates: set[int] = field(default_factory=set)
    has_changelog: bool = False
    duplicates: int = 0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    last: tuple[int, int, int] = (-1, -1, -1)  # (timestamp_ms, partition, offset) of the latest


class IncrementLedger:
    """Accumulates backup keys; `report()` can be called at any time and does not consume."""

    def __init__(self) -> None:
        # (datamart, delta_num) -> incrementId -> state
        self._deltas: dict[tuple[str, int], dict[str, _Increment]] = {}

    def add(self, key: BackupKey, partition: int, offset: int, timestamp_ms: int) -> bool:
        """Record one message; return False when its key was seen before (a duplicate)."""
        runs = self._deltas.setdefault((key.datamart, key.delta_num), {})
        inc = runs.setdefault(key.increment_id, _Increment())
        # Where and when count for every copy: a reader needs the whole offset range, and a
        # re-sent copy is as recent as it looks.
        first, last = inc.offsets.get(partition, (offset, offset))
        inc.offsets[partition] = (min(first, offset), max(last, offset))
        inc.last = max(inc.last, (timestamp_ms, partition, offset))

        ident = (
            key.message_type, key.table_name, key.stream_number, key.chunk_number,
            key.is_last_chunk, key.stream_total, key.delta_date,
        )
        if ident in inc.seen:
            inc.duplicates += 1
            return False
        inc.seen.add(ident)
        inc.stream_totals.add(key.stream_total)
        inc.delta_dates.add(key.delta_date)
        inc.has_changelog |= key.message_type == MESSAGE_TYPE_CHANGELOG
        group = inc.chunks.setdefault(key.stream_number, {}).setdefault(key.table_name, {})
        previous = group.setdefault(key.chunk_number, key.is_last_chunk)
        if previous != key.is_last_chunk:
            # Same position, both flag values: we cannot tell which copy tells the truth.
            inc.conflicts.add(
                f"{_label(key.stream_number, key.table_name)} chunk {key.chunk_number} "
                "seen both with and without isLastChunk"
            )
            group[key.chunk_number] = True
        return True

    def delta_report(self, datamart: str, delta_num: int) -> DeltaReport | None:
        """The report of one delta, or None when no message of it was seen."""
        runs = self._deltas.get((datamart, delta_num))
        return None if runs is None else _delta_report(delta_num, runs)

    def report(self) -> TopicReport:
        by_datamart: dict[str, dict[int, DeltaReport]] = {}
        for (datamart, delta_num), runs in sorted(self._deltas.items(), key=lambda kv: kv[0]):
            by_datamart.setdefault(datamart, {})[delta_num] = _delta_report(delta_num, runs)
        datamarts = {}
        for name, deltas in by_datamart.items():
            datamarts[name] = DatamartReport(name, deltas, gaps(deltas, min(deltas), max(deltas)))
        return TopicReport(datamarts)


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def _delta_report(delta_num: int, runs: dict[str, _Increment]) -> DeltaReport:
    ranked = sorted(runs.items(), key=lambda item: (item[1].last, item[0]))
    increments = [_increment_report(increment_id, inc) for increment_id, inc in ranked]
    complete = [i for i in increments if i.complete]
    chosen = complete[-1] if complete else None
    date_from = chosen or increments[-1]
    return DeltaReport(delta_num, date_from.delta_date, increments, chosen and chosen.increment_id)


def _label(stream: int, table: str | None) -> str:
    return f"stream {stream} / " + (CHANGELOG_LABEL if table is None else f"table {table}")


def _holes(chunks: set[int] | dict[int, bool]) -> list[Range]:
    """The chunk numbers missing below the highest one seen, as ranges (chunks run from 1)."""
    return gaps(chunks, 1, max(chunks))


def _numbers(numbers) -> str:
    """Distinct numbers as printed in a reason: runs as ranges, at most `SHOWN` of them."""
    return render(spans(numbers))


def _values(values: set[int]) -> str:
    """Distinct values (totals, dates) as printed in a reason: at most `SHOWN` of them."""
    shown = sorted(values)[:SHOWN]
    more = f", ... and {len(values) - SHOWN} more" if len(values) > SHOWN else ""
    return ", ".join(map(str, shown)) + more


def _check_stream(
    stream: int, groups: dict[str | None, dict[int, bool]], holes: dict[str, list[Range]]
) -> list[str]:
    """Reasons why one stream is not whole under numbering A nor B (empty when it is whole);
    the holes of the numbering that fits best go into `holes`."""
    all_numbers = [n for chunks in groups.values() for n in chunks]
    union = set(all_numbers)
    if min(union) < 1:
        return [f"stream {stream}: chunk numbers below 1: {_numbers(n for n in union if n < 1)}"]
    lasts = {n for chunks in groups.values() for n, is_last in chunks.items() if is_last}
    repeats = len(all_numbers) != len(union)

    holes_a = _holes(union)
    holes_b = {table: _holes(chunks) for table, chunks in groups.items()}
    whole_a = not repeats and not holes_a and max(union) in lasts
    last_at_top_b = any(chunks[max(chunks)] for chunks in groups.values())
    whole_b = not any(holes_b.values()) and last_at_top_b
    if whole_a or whole_b:
        return []

    # Neither fits: blame the numbering the writer most likely used. A chunk number that repeats
    # across tables of one stream can only come from per-(stream, table) numbering.
    if repeats:
        ordered = sorted(groups, key=_group_order)
        found = {_label(stream, t): holes_b[t] for t in ordered if holes_b[t]}
        misplaced = "is not the highest chunk of any table"
        last_ok = last_at_top_b
    else:
        found = {f"stream {stream}": holes_a} if holes_a else {}
        misplaced = f"is not on the highest chunk ({max(union)})"
        last_ok = max(union) in lasts
    holes.update(found)
    reasons = [f"holes in {label}: chunks {render(ranges)}" for label, ranges in found.items()]
    if not lasts:
        reasons.append(f"stream {stream}: no last chunk seen")
    elif not last_ok and not found:
        reasons.append(f"stream {stream}: isLastChunk on chunk {_numbers(lasts)} {misplaced}")
    return reasons


def _group_order(table: str | None) -> tuple[bool, str]:
    return (table is not None, table or "")  # changelog first, then tables by name


def _increment_report(increment_id: str, inc: _Increment) -> IncrementReport:
    reasons: list[str] = []
    if len(inc.stream_totals) > 1:
        reasons.append(f"inconsistent streamTotal: {_values(inc.stream_totals)}")
    if len(inc.delta_dates) > 1:
        reasons.append(f"inconsistent deltaDate: {_values(inc.delta_dates)}")
    stream_total = max(inc.stream_totals)
    outside = [s for s in inc.chunks if not 1 <= s <= stream_total]
    if outside:
        reasons.append(f"stream numbers outside 1..{stream_total}: {_numbers(outside)}")
    missing_streams = gaps(inc.chunks, 1, stream_total)
    if missing_streams:
        reasons.append(f"missing streams: {render(missing_streams)}")
    holes: dict[str, list[Range]] = {}
    for stream in sorted(inc.chunks):
        reasons.extend(_check_stream(stream, inc.chunks[stream], holes))
    conflicts = sorted(inc.conflicts)
    reasons.extend(conflicts[:SHOWN])
    if len(conflicts) > SHOWN:
        reasons.append(f"... and {len(conflicts) - SHOWN} more chunks seen both with and without isLastChunk")
    if not inc.has_changelog:
        reasons.append("no changelog")
    tables = sorted({t for groups in inc.chunks.values() for t in groups if t is not None})
    return IncrementReport(
        increment_id=increment_id,
        complete=not reasons,
        stream_total=stream_total,
        delta_date=min(inc.delta_dates),
        messages=len(inc.seen),
        duplicates=inc.duplicates,
        tables=tables,
        missing_streams=missing_streams,
        holes=holes,
        reasons=reasons,
        offsets=dict(sorted(inc.offsets.items())),
        last_timestamp_ms=inc.last[0],
    )

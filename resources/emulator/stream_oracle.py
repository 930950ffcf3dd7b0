"""The truth per sealed delta for the Qlik, DataWorks and Datastream emulators' stories.

What flows through: a story (the emulator's) and the decoded records of deltas 0..N (what the
platform sealed and read back from Kafka) -> the true rows of every lake table after delta N,
`{lake table: [row, ...]}`, or None when the truth at that point is not defined.

- Qlik, DataWorks: one partition in source order, deltas end at transaction ends, duplicates
  are re-deliveries of older changes. After delta N the lake must hold the story's state after
  the newest change delivered so far: `state_after(max order key of the records)`. Qlik
  full-load (REFRESH) rows have no changeSequence and sort by row identity, not by delivery: the
  truth is undefined (None) while the full load is still arriving, and defined from its first
  CDC change on (the full load precedes CDC).
- Datastream: events arrive out of order, at most `max_lateness` late (re-delivered duplicates
  aside). A delta with watermark W (sealed with `lateness_seconds` >= that bound, one partition)
  holds every event of source time <= W, plus some newer ones. So the truth is the story's state
  at W, where each key that has a delivered CDC event newer than W takes its true value at the
  newest such event's time (events carry whole rows, so that value is exact). Undefined (None)
  before the backfill's last read: until then the lake lacks rows no event has mentioned yet.

Rows are compared with `canonical` (every column of either side, a missing one as None).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from resources.codecs.cdc import Record
from resources.emulator.formats import emulator_hooks

Rows = dict[str, list[dict]]


def truth_after(fmt: str, story, records: Sequence[Record], watermark_us: int | None) -> Rows | None:
    """The true rows per lake table after a delta: `records` are the decoded records of every
    delta up to it, `watermark_us` its watermark (module docstring); the format's own oracle."""
    return _hooks(fmt).truth_after(story, records, watermark_us)


def final_truth(fmt: str, story) -> Rows:
    """The true rows per lake table once every change of the story has landed."""
    return _hooks(fmt).final_truth(story)


def _hooks(fmt: str):
    hooks = emulator_hooks(fmt)
    if hooks is None:
        raise ValueError(f"no oracle for format {fmt!r}")
    return hooks


def canonical(rows: Iterable[dict], columns: Iterable[str]) -> list[dict]:
    """Rows with exactly `columns` (a missing one None), in one order."""
    names = list(columns)
    out = [{c: r.get(c) for c in names} for r in rows]
    return sorted(out, key=lambda r: [(v is not None, repr(v)) for v in r.values()])


def same_rows(got: Sequence[dict], want: Sequence[dict]) -> bool:
    return not any(row_diff(got, want).values())


def row_diff(got: Sequence[dict], want: Sequence[dict]) -> dict[str, list[dict]]:
    """{"only_in_lake": [...], "only_in_truth": [...]}, over every column of either side."""
    columns = sorted({c for r in got for c in r} | {c for r in want for c in r})
    g, w = canonical(got, columns), canonical(want, columns)
    return {"only_in_lake": [r for r in g if r not in w], "only_in_truth": [r for r in w if r not in g]}

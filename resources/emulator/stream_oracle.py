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

from resources.codecs.cdc import Change, Record, TransactionMark
from resources.lake.stream_changelog import lake_table

Rows = dict[str, list[dict]]


def _tables(state: dict, namespace_of) -> Rows:
    return {lake_table(*namespace_of(t)): list(rows.values()) for t, rows in state.items()}


def qlik_truth(story, records: Sequence[Record]) -> Rows | None:
    keys = [r.order_key for r in records if isinstance(r, Change) and not r.is_backfill]
    if not keys:
        return None  # the full load is still arriving
    return _tables(story.state_after(max(keys)), lambda t: (story.config.schema, t))


def dataworks_truth(story, records: Sequence[Record]) -> Rows | None:
    keys = [r.order_key for r in records if isinstance(r, (Change, TransactionMark)) and r.order_key]
    if not keys:
        return None
    return _tables(story.state_after(max(keys)), lambda t: (story.config.database, t))


def datastream_truth(story, records: Sequence[Record], watermark_us: int | None) -> Rows | None:
    if watermark_us is None or watermark_us < story.backfill_end_us:
        return None
    state = story.state_at(watermark_us)
    newest: dict[tuple[str, tuple], int] = {}
    for r in records:
        if isinstance(r, Change) and not r.is_backfill and r.event_time_us > watermark_us:
            k = (f"{r.namespace}.{r.table}", tuple(r.values[c] for c in r.key_columns))
            newest[k] = max(newest.get(k, r.event_time_us), r.event_time_us)
    if newest:
        history: dict[tuple[str, tuple], list] = {}
        for ch in story.changes:  # in source-time order
            history.setdefault((ch.table, ch.key), []).append(ch)
        for (table, key), t in newest.items():
            row = story.initial.get(table, {}).get(key)
            for ch in history.get((table, key), ()):
                if ch.time_us > t:
                    break
                row = ch.row
            if row is None:
                state[table].pop(key, None)
            else:
                state[table][key] = row
    return _tables(state, lambda t: tuple(t.split(".", 1)))


def truth_after(fmt: str, story, records: Sequence[Record], watermark_us: int | None) -> Rows | None:
    """The true rows per lake table after a delta: `records` are the decoded records of every
    delta up to it, `watermark_us` its watermark (module docstring)."""
    if fmt == "qlik":
        return qlik_truth(story, records)
    if fmt == "dataworks":
        return dataworks_truth(story, records)
    if fmt == "datastream":
        return datastream_truth(story, records, watermark_us)
    raise ValueError(f"no oracle for format {fmt!r}")


def final_truth(fmt: str, story) -> Rows:
    """The true rows per lake table once every change of the story has landed."""
    if fmt == "qlik":
        return _tables(story.final_state(), lambda t: (story.config.schema, t))
    if fmt == "dataworks":
        return _tables(story.state_after(max(e[0] for e in story.log)), lambda t: (story.config.database, t))
    if fmt == "datastream":
        return _tables(story.state_at(story.last_event_time_us), lambda t: tuple(t.split(".", 1)))
    raise ValueError(f"no oracle for format {fmt!r}")


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

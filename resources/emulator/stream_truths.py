"""The truth per sealed delta of the Qlik, DataWorks and Datastream emulators' stories.

What flows through: a story (the emulator's) and the decoded records of deltas 0..N -> the true
rows of every lake table after delta N, `{lake table: [row, ...]}`, or None where the truth at
that point is not defined. Why each rule is right: resources/emulator/stream_oracle.py. Each
format's functions are registered as its oracle in resources/formats/.
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.codecs.cdc import Change, Record, TransactionMark
from resources.lake.stream_changelog import lake_table

Rows = dict[str, list[dict]]


def tables_of(state: dict, namespace_of) -> Rows:
    return {lake_table(*namespace_of(t)): list(rows.values()) for t, rows in state.items()}


def qlik_truth(story, records: Sequence[Record]) -> Rows | None:
    keys = [r.order_key for r in records if isinstance(r, Change) and not r.is_backfill]
    if not keys:
        return None  # the full load is still arriving
    return tables_of(story.state_after(max(keys)), lambda t: (story.config.schema, t))


def dataworks_truth(story, records: Sequence[Record]) -> Rows | None:
    keys = [r.order_key for r in records if isinstance(r, (Change, TransactionMark)) and r.order_key]
    if not keys:
        return None
    return tables_of(story.state_after(max(keys)), lambda t: (story.config.database, t))


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
    return tables_of(state, lambda t: tuple(t.split(".", 1)))


def qlik_final(story) -> Rows:
    return tables_of(story.final_state(), lambda t: (story.config.schema, t))


def dataworks_final(story) -> Rows:
    return tables_of(story.state_after(max(e[0] for e in story.log)), lambda t: (story.config.database, t))


def datastream_final(story) -> Rows:
    return tables_of(story.state_at(story.last_event_time_us), lambda t: tuple(t.split(".", 1)))

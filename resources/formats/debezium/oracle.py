"""The truth per sealed delta of the Debezium emulator's story (resources/formats/debezium/emulator.py).

What flows through: the story and the decoded records of deltas 0..N -> the true rows of every
lake table after delta N, or None while the initial snapshot is still arriving.
Why it is exact: one partition in the connector's order, deltas end at transaction ENDs (or
after a change outside transactions), and duplicates are re-sent older events. So after delta N
the lake holds the story's state after the newest change delivered: `state_after` of the
greatest (position, total_order) among the records. Snapshot reads all carry the snapshot's
position, so they cannot be told apart by it: the truth is defined from the first streamed
change on (the snapshot precedes it on the partition), as for Qlik's full load.
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.codecs.cdc import Change, Record
from resources.emulator.stream_truths import Rows, tables_of


def debezium_truth(story, records: Sequence[Record], _watermark_us: int | None) -> Rows | None:
    changes = [r for r in records if isinstance(r, Change)]
    if not any(not c.is_backfill for c in changes):
        return None
    bound = max((c.order_key[1], c.order_key[2]) for c in changes)
    return tables_of(story.state_after(bound), lambda t: (story.namespace, t))


def debezium_final(story) -> Rows:
    return tables_of(story.final_state(), lambda t: (story.namespace, t))

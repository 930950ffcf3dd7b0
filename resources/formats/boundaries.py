"""Where a change stream may be cut into deltas: one boundary rule (an *observer*) per format.

What flows through: the decoded records of one message at a time, per partition, in offset
order (None for a message that did not decode) -> an `Observation`: what kind of boundary the
message is (`HARD`: any cut may end after it; `SOFT`: only a cut for the row limit; `NONE`),
its event time, the partition's watermark after it, and the rows it carries. An observer keeps
a small JSON-able running state per partition (`st`, stored by the ledger with the progress),
so a restart continues exactly where the last batch ended. The rules of each format are in
resources/changestream/sealing.py's docstring; `resources.formats` says which format uses which.
Pure: no Kafka, no ledger I/O.
"""

from __future__ import annotations

from typing import Any, Protocol

from resources.codecs.cdc import BEFORE_IMAGE, Change, Heartbeat, Record, TableSchema, TransactionMark

# Kinds of marks: what a cut right after this message may be used for (the ledger stores them).
HARD = "hard"  # any cut (a watermark: Qlik transaction end, DataWorks heartbeat, Datastream message)
SOFT = "soft"  # a row-limit cut only (DataWorks TRANSACTION_END with no heartbeat to carry)
NONE = "none"  # never a cut (inside a transaction, half an update, a stale duplicate)
KINDS = (HARD, SOFT, NONE)


class Limits(Protocol):
    """What an observer may read of the source's sealing policy."""

    lateness_seconds: float

def rows_of(records: list[Record]) -> int:
    return sum(1 for r in records if isinstance(r, Change) and r.operation != BEFORE_IMAGE)


def event_time_of(records: list[Record]) -> int | None:
    times = [r.event_time_us for r in records if getattr(r, "event_time_us", None) is not None]
    return max(times) if times else None


def latest(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def key_from_json(value: Any) -> Any:
    """An order key back from JSON (lists -> tuples, recursively)."""
    return tuple(key_from_json(v) for v in value) if isinstance(value, list) else value


Observation = tuple[str, int | None, int | None, int]  # kind, event time, watermark, rows


def times_of(records: list[Record], st: dict) -> tuple[int | None, int | None, int]:
    """Event time, watermark (the greatest event time so far, kept in `st`) and rows of a message."""
    et = event_time_of(records)
    st["max_time"] = latest(st.get("max_time"), et)
    return et, st["max_time"], rows_of(records)


def observe_qlik(records: list[Record] | None, st: dict, policy: Limits) -> Observation:
    if records is None:
        return NONE, None, st.get("max_time"), 0
    et, wm, rows = times_of(records, st)
    open_txn = st.get("open_txn")
    changes = [r for r in records if isinstance(r, Change)]
    if not changes:  # a metadata message (or a tombstone)
        outside = open_txn is None and any(isinstance(r, TableSchema) for r in records)
        return (HARD if outside else NONE), et, wm, rows
    last = changes[-1]
    if last.is_backfill:  # REFRESH rows belong to no transaction
        return (HARD if open_txn is None else NONE), et, wm, rows
    end = key_from_json(st.get("end_key"))
    if end is not None and last.order_key <= end:
        return NONE, et, wm, rows  # a copy of a change of a transaction already ended
    if last.last_in_transaction is True:
        st["open_txn"], st["end_key"] = None, list(last.order_key)
        return HARD, et, wm, rows
    if last.last_in_transaction is False:
        st["open_txn"] = last.transaction_id or "?"
        return NONE, et, wm, rows
    return (HARD if open_txn is None else NONE), et, wm, rows  # no transaction flag: its own


def observe_dataworks(records: list[Record] | None, st: dict, policy: Limits) -> Observation:
    if records is None:
        return NONE, None, st.get("max_time"), 0
    et, wm, rows = times_of(records, st)
    busy = bool(st.get("in_txn")) or st.get("half") is not None
    beats = [r for r in records if isinstance(r, Heartbeat)]
    if beats:
        t = max(b.event_time_us for b in beats)
        if busy:  # never cut inside a transaction: the heartbeat waits for its end
            st["deferred"] = latest(st.get("deferred"), t)
            return NONE, et, wm, rows
        if st.get("last_hb") is None or t > st["last_hb"]:
            st["last_hb"] = t
            return HARD, et, wm, rows
        return NONE, et, wm, rows  # a re-sent heartbeat
    keys = [r.order_key for r in records if getattr(r, "order_key", None) is not None]
    if keys:
        top = max(keys)
        seen = key_from_json(st.get("max_key"))
        if seen is not None and top <= seen:
            return NONE, et, wm, rows  # re-sent after a failover: already accounted for
        st["max_key"] = list(top)
    kind = NONE
    for r in records:
        if isinstance(r, TransactionMark):
            if r.kind == "begin":
                st["in_txn"], st["half"] = True, None
            else:  # "end" (TRANSACTION_END, XACOMMIT) or "rollback" (XAROLLBACK): the transaction is over
                st["in_txn"], st["half"] = False, None
                if r.kind == "end":
                    if st.get("deferred") is not None:
                        st["last_hb"] = latest(st.get("last_hb"), st.pop("deferred"))
                        kind = HARD
                    else:
                        kind = SOFT
        elif isinstance(r, Change):
            ident = list(r.order_key[:2])
            if r.source_op == "UPDATE_BEFOR":
                st["half"] = ident
            elif r.source_op == "UPDATE_AFTER" and st.get("half") == ident:
                st["half"] = None
    return kind, et, wm, rows


def observe_datastream(records: list[Record] | None, st: dict, policy: Limits) -> Observation:
    et = None if records is None else event_time_of(records)
    st["max_time"] = latest(st.get("max_time"), et)
    seen = st["max_time"]
    wm = None if seen is None else seen - int(policy.lateness_seconds * 1_000_000)
    return HARD, et, wm, 0 if records is None else rows_of(records)


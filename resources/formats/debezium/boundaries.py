"""Where a Debezium stream may be cut into deltas (the sealer's observer for this format).

Rule: a transaction's END event is a boundary (the connector's transaction events, routed into
the source's topic with `provide.transaction.metadata`); changes between its BEGIN and END are
not. A change outside any BEGIN..END (snapshot reads `op=r`, a topic without transaction events)
is a boundary of its own, as a Qlik change with no transaction flag is. So on a routed topic a
delta holds whole transactions, across tables; on a per-table topic without transaction events it
may end between two changes of one transaction (documented in docs/how-it-works.md).
Duplicates re-sent after a connector restart change nothing: a change whose order key is not
above the greatest seen, and a BEGIN or END of a transaction already ended (the last
`REMEMBERED` ended ids are kept), are never boundaries and never reopen a transaction.
Watermark: the greatest `source.ts_ms` seen. A bad message or a tombstone is never a boundary.
"""

from __future__ import annotations

from resources.formats.boundaries import HARD, NONE, Limits, Observation, key_from_json, times_of
from resources.codecs.cdc import Record, TransactionMark

REMEMBERED = 64  # ended transaction ids kept per partition: a restart re-sends only the last few


def observe_debezium(records: list[Record] | None, st: dict, policy: Limits) -> Observation:
    if records is None:
        return NONE, None, st.get("max_time"), 0
    et, wm, rows = times_of(records, st)
    kind = NONE
    for r in records:
        if isinstance(r, TransactionMark):
            ended = st.setdefault("ended", [])
            if r.transaction_id in ended:
                continue  # re-sent after a restart: that transaction is already sealed
            if r.kind == "begin":
                st["open_txn"] = r.transaction_id
            else:
                st["open_txn"] = None
                st["ended"] = (ended + [r.transaction_id])[-REMEMBERED:]
                kind = HARD
            continue
        key = getattr(r, "order_key", None)
        if key is None:
            continue
        top = key_from_json(st.get("max_key"))
        if top is not None and key <= top:
            continue  # a change re-sent after a restart: already accounted for
        st["max_key"] = list(key)
        if st.get("open_txn") is None:
            kind = HARD
    return kind, et, wm, rows

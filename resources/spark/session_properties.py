"""The session-wide Iceberg snapshot properties a SQL MERGE commits with.

What flows through: a block's properties (``deltaport.delta``, the commit id, ...), set as the
session settings ``spark.sql.iceberg.snapshot-property.<key>`` for as long as the block runs (SQL
has no write options), and put back as they were when it ends.

Guarantees: a commit made inside a block records the block's properties. The settings are the
session's, seen by every statement on it, so blocks share them only where that is harmless:
- `shared` properties (the delta, the commit id, a range's deltas): blocks asking for exactly
  the same ones hold them together (one delta's MERGEs into several tables, side by side); a
  block asking for other ones waits until the last holder has left;
- `own` properties: a table's own facts (a change stream's key columns and tombstones), keyed by
  the table (`own_property`), so one MERGE's commit may record another table's too without
  anybody reading them: blocks whose own keys differ hold together, and each puts its own keys
  back when it leaves. Readers look for the key of their table, then the plain name that
  commits made before these keys carry (`recorded_property`; in SQL,
  `iceberg_reads.recorded_property_sql`).
`without_session_properties` is the block of a commit that must record none of them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

SESSION_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."


def own_property(name: str, ident: str) -> str:
    """The summary key under which a commit of table `ident` (``catalog.namespace.table``)
    records its own property `name`: ``<name>.<namespace>.<table>`` (without the catalog, so
    a catalog that is renamed still finds it)."""
    return f"{name}.{ident.split('.', 1)[1] if '.' in ident else ident}"


def recorded_property(summary: Mapping[str, str], name: str, ident: str) -> str | None:
    """Property `name` of table `ident` as its commit's `summary` records it: under the table's
    own key, or (a commit made before own keys) under the plain name; None if neither."""
    own = summary.get(own_property(name, ident))
    return own if own is not None else summary.get(name)


class _SessionProperties:
    """Who holds the session's snapshot properties now: the shared ones (session, sorted items)
    and their holders, and each own key held with the value it had before."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.held: tuple | None = None
        self.holders = 0
        self.before: dict[str, str | None] = {}
        self.own_before: dict[str, str | None] = {}


_held = _SessionProperties()


@contextlib.contextmanager
def session_snapshot_properties(spark, shared: Mapping[str, str],
                                own: Mapping[str, str] | None = None) -> Iterator[None]:
    """Hold `shared` and `own` (module docstring) as the session's snapshot properties for the
    block; the session's own settings come back when the last holder leaves."""
    keys = {SESSION_PROPERTY_PREFIX + k: str(v) for k, v in shared.items()}
    mine = {SESSION_PROPERTY_PREFIX + k: str(v) for k, v in (own or {}).items()}
    wanted = (id(spark), tuple(sorted(keys.items())))
    state = _held
    with state.changed:
        while state.holders and (state.held != wanted or any(k in state.own_before for k in mine)):
            state.changed.wait()
        if not state.holders:
            state.before = {k: spark.conf.get(k, None) for k in keys}
            try:
                for k, v in keys.items():
                    spark.conf.set(k, v)
            except BaseException:
                _restore(spark, state.before)
                raise
            state.held = wanted
        try:
            before = {k: spark.conf.get(k, None) for k in mine}
            for k, v in mine.items():
                state.own_before[k] = before[k]
                spark.conf.set(k, v)
        except BaseException:
            _leave(spark, state, mine)
            raise
        state.holders += 1
    try:
        yield
    finally:
        with state.changed:
            state.holders -= 1
            _leave(spark, state, mine)


def _leave(spark, state: _SessionProperties, mine: Mapping[str, str]) -> None:
    """Put back this block's own keys, and the shared ones if nobody holds them (lock held)."""
    try:
        _restore(spark, {k: state.own_before.pop(k) for k in mine if k in state.own_before})
        if not state.holders:
            state.held = None
            _restore(spark, state.before)
    finally:
        state.changed.notify_all()


def without_session_properties(spark):
    """A block for a commit that must not record another block's snapshot properties (a write,
    a DELETE, run beside MERGEs that hold them): it waits until they are unset."""
    return session_snapshot_properties(spark, {})


def _restore(spark, before: Mapping[str, str | None]) -> None:
    for k, old in before.items():
        if old is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, old)

"""Parser of the DDL in a Prostore changelog, and the schema state it builds.

Each changelog record's `changeQuery` is one DDL statement. `parse_ddl` turns it into a typed
statement: `CreateTable`, `CreateView` (logical or materialized, CREATE OR REPLACE and ALTER VIEW
too), `DropTable`, `DropView`, `AlterTable` (ADD [COLUMN], DROP [COLUMN], RENAME COLUMN .. TO ..,
several comma-separated), or `OtherStatement` for anything else (CREATE DATABASE, external
tables, ...), which is kept, never an error. `replay_changelog` applies records in changeNum order
and returns the schema of every live entity, keyed by its unqualified name.

Column changes: ADD appends the column, DROP removes it, RENAME renames it in place. Each column
has an identity (`EntitySchema.column_ids`: the changeNum and position of the statement that
created it) that a RENAME keeps, so `column_transition` can say how rows written under one
version of a table read under a later one (which column continues which, which are new, which
are gone, whether the table itself was dropped and created again). An ALTER TABLE that cannot be
applied (unknown table or column, a name taken, a primary- or distribution-key column dropped or
renamed, an action this parser does not know) raises `DdlParseError` naming the changeNum:
guessing would land data under the wrong schema.

Guarantees: a well-formed CREATE TABLE yields typed columns (`types.Column`), a primary key and
a distribution key that name declared columns; the seed's own DDL is accepted verbatim, including
its stray closing parenthesis (`... PRIMARY KEY (id)) DISTRIBUTED BY (id))`), so stray `)` after
the column list are tolerated, as are unknown trailing clauses. A CREATE TABLE that cannot be
understood (no columns, unknown type, no primary key, a key naming no column) raises
`DdlParseError` with the reason. Unquoted identifiers are case-insensitive and lowercased (as
Prostore stores them); quoted ones ("x" or `x`) keep their case.

Three modules: the statements (`ddl_statements.py`), their parser (`ddl_parser.py`: the tokenizer
is hand-written and never raises, an unterminated quote just runs to the end), and here the
schema state they build; every name is importable from here as before.
"""

from __future__ import annotations

import operator
import threading
from dataclasses import dataclass, field, replace
from functools import lru_cache
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from resources.codecs.ddl_parser import parse_ddl
from resources.codecs.ddl_statements import (AddColumn, AlterAction, AlterTable, CreateTable, CreateView, DropColumn,
                                             DropTable, DropView, EntityKind, OtherStatement, RenameColumn, Statement)
from resources.codecs.types import Column
from resources.errors import DdlParseError

__all__ = ["AddColumn", "AlterAction", "AlterTable", "ColumnTransition", "CreateTable", "CreateView", "DropColumn",
           "DropTable", "DropView", "EntityKind", "EntitySchema", "OtherStatement", "RenameColumn", "Statement",
           "column_transition", "parse_ddl", "replay_changelog"]


@dataclass(frozen=True)
class EntitySchema:
    """The live schema of one logical entity after replaying the changelog."""

    datamart: str | None
    name: str
    kind: EntityKind
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    distributed_by: tuple[str, ...] = ()
    datasource_types: tuple[str, ...] = ()
    query: str | None = None  # views only
    change_num: int | None = None  # the changelog record that created it (ALTER keeps it)
    # One identity per column, "<changeNum>.<position>" of the statement that created it; a
    # RENAME keeps it, so it tells a renamed column from a new one. Lineage, not schema: left
    # out of equality, and empty for an EntitySchema built by hand.
    column_ids: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class ColumnTransition:
    """How the rows of a table written under schema `before` read under a later schema.

    `sources` maps each column of the later schema to the column of `before` it continues
    (the same name, or the old name of a renamed column), or None for a column created since
    (added, or dropped and added again: old rows have no value for it). `dropped` lists the
    columns of `before` that nothing continues. `recreated`: the table was dropped and created
    again (or replaced) in between, so no old row belongs to it any more.
    """

    sources: Mapping[str, str | None]
    dropped: tuple[str, ...] = ()
    recreated: bool = False

    @property
    def renamed(self) -> dict[str, str]:
        """{new name: old name} of the renamed columns."""
        return {new: old for new, old in self.sources.items() if old is not None and old != new}

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(new for new, old in self.sources.items() if old is None)

    @property
    def unchanged(self) -> bool:
        return not (self.recreated or self.dropped or self.renamed or self.added)


def column_transition(before: EntitySchema, after: EntitySchema) -> ColumnTransition:
    """Compare two versions of one table from `replay_changelog` (see `ColumnTransition`)."""
    if before.change_num != after.change_num or before.kind != after.kind:
        return ColumnTransition({c.name: None for c in after.columns},
                                tuple(c.name for c in before.columns), recreated=True)
    by_ids = bool(before.column_ids and after.column_ids)  # by hand, without ids: by name

    def ids(entity: EntitySchema) -> tuple[str, ...]:
        return entity.column_ids if by_ids else tuple(c.name for c in entity.columns)

    old_by_id = dict(zip(ids(before), (c.name for c in before.columns)))
    sources = {c.name: old_by_id.get(i) for c, i in zip(after.columns, ids(after))}
    kept = set(sources.values())
    return ColumnTransition(sources, tuple(c.name for c in before.columns if c.name not in kept))



def _field(record: Any, attr: str, key: str) -> Any:
    return record[key] if isinstance(record, Mapping) else getattr(record, attr)


def replay_changelog(records: Iterable[Any]) -> dict[str, EntitySchema]:
    """Apply changelog records in changeNum order; return the live entities by unqualified name.

    A record is a `backup.ChangelogRecord` or a mapping with the Avro field names (changeNum,
    entityName, changeQuery). The key is the name parsed from the DDL, not `entityName` (the
    seed's first record says "marketing" for `CREATE TABLE marketing.sales`). CREATE of an
    existing name replaces it (so a table dropped and created again is a new table: its
    `change_num` and column ids are new); DROP removes it; ALTER TABLE changes its columns (see
    the module docstring); other statements change nothing.

    The same changelog replays once: a Prostore backup carries the whole changelog with every
    delta (one CREATE TABLE per table of the datamart), and a steady delta's step asks for its
    schema a dozen times, which at 500 tables cost about 40 ms a replay (issue 57). A step asks
    with the same list of records each time (`_by_identity`), so such a call neither sorts nor
    keys the records again; other records are looked up by their (changeNum, changeQuery) pairs.
    The result is a fresh dict each call (its entities are frozen), so a caller may change it.
    """
    held = isinstance(records, (list, tuple))  # a caller's list, which it may pass again
    known = _by_identity.get(records) if held else None
    if known is not None:
        return dict(known)
    ordered = tuple(sorted(((_field(r, "change_num", "changeNum"), _field(r, "change_query", "changeQuery"))
                            for r in records), key=_change_num))
    replayed = _replayed(ordered)
    if held:
        _by_identity.put(records, replayed)
    return dict(replayed)


def _change_num(record: tuple[int, str]) -> int:
    return record[0]


class _IdentityCache:
    """{a list or tuple of records: its replay}, by the object itself: a hit builds no key, only
    checks each record's identity (at C speed: 6-16 us a call at 500 records, the caller's copy
    included, where the (changeNum, changeQuery) key cost 0.2-0.6 ms: a sort and a Python call
    per record). Sound because a list is answered only while it holds the very record objects it
    held when it was replayed, and only when those are frozen (a list of mappings, which can
    change in place, is never held); the cache keeps each list it holds alive, so no other
    object can take its id."""

    def __init__(self, size: int):
        self._size = size
        self._held: dict[int, tuple[Sequence, tuple, dict[str, EntitySchema]]] = {}
        self._lock = threading.Lock()

    def get(self, records: Sequence) -> dict[str, EntitySchema] | None:
        held = self._held.get(id(records))
        if held is None or held[0] is not records:
            return None
        items = held[1]
        if records is not items and (len(records) != len(items) or not all(map(operator.is_, records, items))):
            return None  # the list changed since
        return held[2]

    def put(self, records: Sequence, replayed: dict[str, EntitySchema]) -> None:
        if not all(map(_frozen, set(map(type, records)))):
            return
        with self._lock:
            self._held.pop(id(records), None)
            self._held[id(records)] = (records, records if isinstance(records, tuple) else tuple(records), replayed)
            while len(self._held) > self._size:
                del self._held[next(iter(self._held))]  # the oldest


def _frozen(kind: type) -> bool:
    """Whether records of this type cannot change in place: a frozen dataclass (`backup.ChangelogRecord`)."""
    params = getattr(kind, "__dataclass_params__", None)
    return params is not None and params.frozen


# A step's lists of records: a run's deltas', the lake's before it, each held by several parts.
_by_identity = _IdentityCache(32)


@lru_cache(maxsize=16)  # a few changelogs at a time: a run's deltas, the one before it, a reader's
def _replayed(ordered: tuple[tuple[int, str], ...]) -> dict[str, EntitySchema]:
    """The live entities after `ordered` ((changeNum, changeQuery), in changeNum order); never
    changed once returned (`replay_changelog` hands out copies)."""
    state: dict[str, EntitySchema] = {}
    for change_num, query in ordered:
        try:
            stmt = parse_ddl(query)
        except DdlParseError as exc:
            raise DdlParseError(f"changeNum {change_num}: {exc.reason}", exc.query) from None
        if isinstance(stmt, CreateTable):
            state[stmt.name] = EntitySchema(
                stmt.datamart, stmt.name, "table", stmt.columns, stmt.primary_key,
                stmt.distributed_by, stmt.datasource_types, None, change_num,
                _new_ids(change_num, len(stmt.columns)),
            )
        elif isinstance(stmt, CreateView):
            state[stmt.name] = EntitySchema(
                stmt.datamart, stmt.name, stmt.kind, stmt.columns, stmt.primary_key,
                stmt.distributed_by, stmt.datasource_types, stmt.query, change_num,
                _new_ids(change_num, len(stmt.columns)),
            )
        elif isinstance(stmt, (DropTable, DropView)):
            state.pop(stmt.name, None)
        elif isinstance(stmt, AlterTable):
            entity = state.get(stmt.name)
            if entity is None or entity.kind != "table":
                if stmt.if_exists:
                    continue
                what = "no table" if entity is None else f"a {entity.kind.replace('_', ' ')}"
                raise DdlParseError(f"changeNum {change_num}: ALTER TABLE {stmt.name!r}, which is {what}", query)
            state[stmt.name] = _alter(entity, stmt, change_num, query)
    return state


def _new_ids(change_num: int, count: int) -> tuple[str, ...]:
    return tuple(f"{change_num}.{i}" for i in range(count))


def _alter(entity: EntitySchema, stmt: AlterTable, change_num: int, query: str) -> EntitySchema:
    """`entity` after the actions of one ALTER TABLE, left to right."""
    columns = list(entity.columns)
    ids = list(entity.column_ids or _new_ids(entity.change_num or 0, len(columns)))

    def fail(reason: str) -> DdlParseError:
        return DdlParseError(f"changeNum {change_num}: ALTER TABLE {entity.name}: {reason}", query)

    def index(name: str) -> int | None:
        return next((i for i, c in enumerate(columns) if c.name == name), None)

    def check_not_key(name: str, verb: str) -> None:
        for role, keys in (("primary key", entity.primary_key), ("distribution key", entity.distributed_by)):
            if name in keys:
                raise fail(f"cannot {verb} {role} column {name!r}")

    for pos, action in enumerate(stmt.actions):
        if isinstance(action, AddColumn):
            if index(action.column.name) is not None:
                if action.if_not_exists:
                    continue
                raise fail(f"column {action.column.name!r} already exists")
            columns.append(action.column)
            ids.append(f"{change_num}.{pos}")
        elif isinstance(action, DropColumn):
            i = index(action.name)
            if i is None:
                if action.if_exists:
                    continue
                raise fail(f"no column {action.name!r} to drop")
            check_not_key(action.name, "drop")
            del columns[i], ids[i]
        else:
            i = index(action.old)
            if i is None:
                raise fail(f"no column {action.old!r} to rename")
            check_not_key(action.old, "rename")
            if action.new != action.old and index(action.new) is not None:
                raise fail(f"cannot rename {action.old!r} to {action.new!r}: that column exists")
            columns[i] = replace(columns[i], name=action.new)
    return replace(entity, columns=tuple(columns), column_ids=tuple(ids))

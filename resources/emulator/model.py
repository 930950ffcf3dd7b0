"""A logical Prostore database in memory: tables, their rows, the schema changelog.

The model is the emulator's ground truth. Every write goes through it, so after each closed
delta it can say exactly what every table holds: that is the oracle the lake is compared to.
Values are always in the canonical Python form of `resources.codecs.types.python_value`
(floats rounded to float32 where the column is FLOAT, naive UTC datetimes, ...), so a value
that round-trips through Avro compares equal to the truth.

Column changes (ALTER TABLE) apply to the live rows as Prostore shows them afterwards: an added
column is NULL in every existing row until the row is written again, a renamed column keeps its
values under the new name, a dropped column disappears from every row. Rows are never mutated
in place (a truth snapshot shares them), so an ALTER builds new row dicts. A change recorded
before an ALTER keeps the shape it was written in; `conform` brings it to the current columns,
as a later export of that data (a re-export, a snapshot backup) would write it.

Deterministic: all randomness comes from the `random.Random` handed in.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from dataclasses import dataclass, field

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import AddColumn, AlterAction, AlterTable, CreateTable, DropColumn, parse_ddl
from resources.codecs.types import Column, python_value

Row = dict[str, object]
Key = tuple

# Words with non-ASCII text on purpose: the lake must carry UTF-8 unharmed.
_WORDS = ["Покупка", "по", "акции", "1+1", "без", "акций", "café", "naïve", "東京", "ß", "store", "sale", "ёлка"]


@dataclass
class Table:
    """One logical table: its DDL-derived columns, primary key and current rows."""

    datamart: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    rows: dict[Key, Row] = field(default_factory=dict)
    next_id: int = 1

    def key_of(self, row: Row) -> Key:
        return tuple(row[c] for c in self.primary_key)


@dataclass
class Change:
    """One row change as it lands in an increment: the row's values plus sys_op."""

    table: str
    row: Row
    sys_op: int  # 0 upsert, 1 delete
    ddl_version: int = 0  # length of the changelog when the row was written (its columns' version)


class LogicalDatabase:
    """One datamart: runs DDL, applies writes, and snapshots its true state."""

    def __init__(self, name: str, rng: random.Random):
        self.name = name
        self.rng = rng
        self.tables: dict[str, Table] = {}
        self.views: dict[str, str] = {}
        self.changelog: list[ChangelogRecord] = []
        # (changelog position, table, action) of every ALTER TABLE action, in order
        self.column_ops: list[tuple[int, str, AlterAction]] = []

    # --- DDL -------------------------------------------------------------------------------
    def run_ddl(self, entity_name: str, query: str) -> None:
        """Append the statement to the changelog and apply it to the schema."""
        stmt = parse_ddl(query)
        version = len(self.changelog)
        self.changelog.append(ChangelogRecord(version, entity_name, query))
        kind = type(stmt).__name__
        if isinstance(stmt, CreateTable):
            self.tables[stmt.name] = Table(self.name, stmt.name, tuple(stmt.columns), tuple(stmt.primary_key))
        elif isinstance(stmt, AlterTable):
            table = self.tables[stmt.name]
            for action in stmt.actions:
                self.column_ops.append((version, stmt.name, action))
                table.columns = alter_columns(table.columns, action)
                table.rows = {key: alter_row(row, action) for key, row in table.rows.items()}
        elif kind == "CreateView":
            self.views[stmt.name] = query
        elif kind == "DropView":
            self.views.pop(stmt.name, None)
        elif kind == "DropTable":
            self.tables.pop(stmt.name, None)

    # --- writes ----------------------------------------------------------------------------
    def random_row(self, table: Table, key: Key | None = None) -> Row:
        row: Row = {}
        for col in table.columns:
            if key is not None and col.name in table.primary_key:
                row[col.name] = key[table.primary_key.index(col.name)]
            elif col.name in table.primary_key:
                row[col.name] = table.next_id
            elif col.nullable and self.rng.random() < 0.1:
                row[col.name] = None
            else:
                row[col.name] = python_value(col, random_value(col, self.rng))
        if key is None:
            table.next_id += 1
        return row

    def write(self, table_name: str, inserts: int, updates: int, deletes: int, touched: set) -> list[Change]:
        """Run one write operation on a table; return its changes.

        `touched` holds the (table, key) pairs already changed in the current increment: each key
        changes at most once per increment, so an increment holds one version per row, as
        Prostore's own (versioned by delta) storage exports it.
        """
        table = self.tables[table_name]
        changes: list[Change] = []
        for _ in range(inserts):
            row = self.random_row(table)
            key = table.key_of(row)
            table.rows[key] = row
            touched.add((table_name, key))
            changes.append(Change(table_name, dict(row), 0, len(self.changelog)))
        candidates = [k for k in table.rows if (table_name, k) not in touched]
        self.rng.shuffle(candidates)
        for key in candidates[:updates]:
            row = self.random_row(table, key)
            table.rows[key] = row
            touched.add((table_name, key))
            changes.append(Change(table_name, dict(row), 0, len(self.changelog)))
        for key in candidates[updates : updates + deletes]:
            row = table.rows.pop(key)
            touched.add((table_name, key))
            changes.append(Change(table_name, dict(row), 1, len(self.changelog)))
        return changes

    def conform(self, table: str, row: Row, ddl_version: int) -> Row:
        """`row`, written when the changelog had `ddl_version` records, in the table's current
        columns (the ALTERs since then applied)."""
        for version, name, action in self.column_ops:
            if version >= ddl_version and name == table:
                row = alter_row(row, action)
        return row

    def restore(self, before: dict[str, dict[Key, Row]]) -> None:
        """Roll the tables back to `before` (a cancelled delta leaves no trace in the data)."""
        for name, rows in before.items():
            if name in self.tables:
                self.tables[name].rows = dict(rows)

    def state(self) -> dict[str, dict[Key, Row]]:
        """A deep-enough copy of every table's rows (rows are never mutated in place)."""
        return {name: dict(t.rows) for name, t in self.tables.items()}


def alter_columns(columns: tuple[Column, ...], action: AlterAction) -> tuple[Column, ...]:
    if isinstance(action, AddColumn):
        return (*columns, action.column)
    if isinstance(action, DropColumn):
        return tuple(c for c in columns if c.name != action.name)
    return tuple(Column(action.new, c.type, c.length, c.nullable) if c.name == action.old else c for c in columns)


def alter_row(row: Row, action: AlterAction) -> Row:
    """A new row dict: the row as it reads after the action."""
    if isinstance(action, AddColumn):
        return {**row, action.column.name: None}
    if isinstance(action, DropColumn):
        return {k: v for k, v in row.items() if k != action.name}
    return {(action.new if k == action.old else k): v for k, v in row.items()}


def random_value(col: Column, rng: random.Random) -> object:
    """A random value of the column's logical type, in canonical Python form."""
    t = col.type
    if t in ("bigint", "int"):
        return rng.randint(-(2**62), 2**62)
    if t == "int32":
        return rng.randint(-(2**31), 2**31 - 1)
    if t == "boolean":
        return rng.random() < 0.5
    if t in ("float", "double"):
        return round(rng.uniform(-1e6, 1e6), 6)
    if t == "char":
        n = col.length or 1
        return "".join(rng.choice("abcdefghXYZ0123ёж") for _ in range(rng.randint(1, n)))
    if t == "varchar":
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 5)))
        return text[: col.length] if col.length else text
    if t == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if t == "link":
        return f"https://example.org/{rng.choice(_WORDS)}/{rng.randint(1, 10**6)}"
    if t == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-3650, 30000))
    if t == "time":
        return (dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 86_399_999_999))).time()
    if t == "timestamp":
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 2**52))
    raise ValueError(f"no generator for column type {t!r}")

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

The tokenizer is hand-written and never raises: an unterminated quote just runs to the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from resources.codecs.types import Column, UnknownTypeError
from resources.errors import DdlParseError

EntityKind = Literal["table", "view", "materialized_view"]


@dataclass(frozen=True)
class CreateTable:
    datamart: str | None
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    distributed_by: tuple[str, ...]
    datasource_types: tuple[str, ...]


@dataclass(frozen=True)
class CreateView:
    """CREATE [OR REPLACE] VIEW, CREATE MATERIALIZED VIEW, ALTER VIEW. `query` is the text after
    AS, verbatim. A materialized view declares columns and keys like a table; a view does not."""

    datamart: str | None
    name: str
    kind: Literal["view", "materialized_view"]
    query: str
    or_replace: bool = False
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    distributed_by: tuple[str, ...] = ()
    datasource_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class DropTable:
    datamart: str | None
    name: str


@dataclass(frozen=True)
class DropView:
    datamart: str | None
    name: str
    kind: Literal["view", "materialized_view"] = "view"


@dataclass(frozen=True)
class AddColumn:
    column: Column
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


AlterAction = AddColumn | DropColumn | RenameColumn


@dataclass(frozen=True)
class AlterTable:
    """ALTER TABLE [IF EXISTS] [dm.]t action[, action ...]; actions apply left to right."""

    datamart: str | None
    name: str
    actions: tuple[AlterAction, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class OtherStatement:
    """A statement that changes no table or view schema this platform tracks."""

    verb: str  # first words, uppercased, e.g. "CREATE DATABASE"
    query: str


Statement = CreateTable | CreateView | DropTable | DropView | AlterTable | OtherStatement


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


# ---------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Tok:
    kind: Literal["word", "quoted", "number", "string", "punct"]
    value: str  # words lowercased; quoted/string unquoted
    start: int
    end: int


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "'\"`":
            # A doubled quote inside is an escaped quote, as in SQL.
            j, buf = i + 1, []
            while j < n:
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        buf.append(c)
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            kind = "string" if c == "'" else "quoted"
            toks.append(_Tok(kind, "".join(buf), i, min(j + 1, n)))
            i = j + 1
        elif c.isalnum() or c in "_$":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            word = text[i:j]
            kind = "number" if word.isdigit() else "word"
            toks.append(_Tok(kind, word if kind == "number" else word.lower(), i, j))
            i = j
        else:
            toks.append(_Tok("punct", c, i, i + 1))
            i += 1
    return toks


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.pos = 0

    # -- primitives
    def fail(self, reason: str) -> DdlParseError:
        return DdlParseError(reason, self.text)

    def peek(self, ahead: int = 0) -> _Tok | None:
        i = self.pos + ahead
        return self.toks[i] if i < len(self.toks) else None

    def at_end(self) -> bool:
        tok = self.peek()
        return tok is None or (tok.kind == "punct" and tok.value == ";")

    def is_kw(self, *words: str) -> bool:
        for k, word in enumerate(words):
            tok = self.peek(k)
            if tok is None or tok.kind != "word" or tok.value != word:
                return False
        return True

    def accept_kw(self, *words: str) -> bool:
        if self.is_kw(*words):
            self.pos += len(words)
            return True
        return False

    def is_punct(self, ch: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "punct" and tok.value == ch

    def accept_punct(self, ch: str) -> bool:
        if self.is_punct(ch):
            self.pos += 1
            return True
        return False

    def describe(self) -> str:
        tok = self.peek()
        return "end of statement" if tok is None else repr(self.text[tok.start : tok.end])

    def ident(self, what: str) -> str:
        tok = self.peek()
        if tok is None or tok.kind not in ("word", "quoted"):
            raise self.fail(f"expected {what}, found {self.describe()}")
        self.pos += 1
        return tok.value

    def qualified_name(self, what: str) -> tuple[str | None, str]:
        parts = [self.ident(what)]
        while self.accept_punct("."):
            parts.append(self.ident(what))
        return (parts[-2] if len(parts) > 1 else None), parts[-1]

    def skip_group(self) -> None:
        """Skip one token, or a whole balanced (...) group when at '('."""
        depth = 0
        while self.peek() is not None:
            tok = self.toks[self.pos]
            self.pos += 1
            if tok.kind == "punct" and tok.value == "(":
                depth += 1
            elif tok.kind == "punct" and tok.value == ")":
                depth -= 1
            if depth <= 0:
                return

    def name_list(self, what: str) -> tuple[str, ...]:
        """`(a, b)` or a bare `a`."""
        if not self.accept_punct("("):
            return (self.ident(what),)
        names = [self.ident(what)]
        while self.accept_punct(","):
            names.append(self.ident(what))
        if not self.accept_punct(")"):
            raise self.fail(f"expected ')' after {what} list, found {self.describe()}")
        return tuple(names)

    def datasource_types(self) -> tuple[str, ...]:
        """`('adqm')`, `(adb, adqm)`, `= 'adb'` or `'adb'`."""
        self.accept_punct("=")
        if not self.accept_punct("("):
            tok = self.peek()
            if tok is None or tok.kind not in ("word", "string", "quoted"):
                raise self.fail(
                    f"expected a datasource after DATASOURCE_TYPE, found {self.describe()}"
                )
            self.pos += 1
            return (tok.value.lower(),)
        values: list[str] = []
        while not self.accept_punct(")"):
            tok = self.peek()
            if tok is None:
                raise self.fail("unclosed DATASOURCE_TYPE list")
            self.pos += 1
            if tok.kind in ("word", "string", "quoted"):
                values.append(tok.value.lower())
            elif not (tok.kind == "punct" and tok.value == ","):
                raise self.fail(f"unexpected {tok.value!r} in DATASOURCE_TYPE list")
        return tuple(values)

    # -- column list (tables and materialized views)
    def column_list(self) -> tuple[tuple[Column, ...], tuple[str, ...]]:
        columns: list[Column] = []
        primary_key: list[str] = []
        if not self.accept_punct("("):
            raise self.fail(f"expected '(' and column definitions, found {self.describe()}")
        while True:
            if self.accept_punct(")"):
                break
            # Tolerated: a column list whose ')' is missing before DISTRIBUTED BY or the end.
            if self.at_end() or self.is_kw("distributed", "by"):
                break
            if self.accept_kw("constraint"):
                self.ident("constraint name")
            if self.accept_kw("primary", "key"):
                primary_key.extend(self.name_list("primary key column"))
            else:
                column, inline_pk = self.column_def()
                columns.append(column)
                if inline_pk:
                    primary_key.append(column.name)
            if not self.accept_punct(","):
                if self.accept_punct(")"):
                    break
                if not (self.at_end() or self.is_kw("distributed", "by")):
                    raise self.fail(f"expected ',' or ')' in column list, found {self.describe()}")
        return tuple(columns), tuple(primary_key)

    def column_def(self) -> tuple[Column, bool]:
        name = self.ident("column name")
        tok = self.peek()
        if tok is None or tok.kind != "word":
            raise self.fail(f"expected a type for column {name!r}, found {self.describe()}")
        self.pos += 1
        type_name, length = tok.value, None
        if self.accept_punct("("):  # char(10), varchar(256), timestamp(6)
            size = self.peek()
            if size is None or size.kind != "number":
                raise self.fail(f"expected a length in {type_name}(...) of column {name!r}")
            self.pos += 1
            length = int(size.value)
            while not self.accept_punct(")"):
                if self.peek() is None:
                    raise self.fail(f"unclosed {type_name}(...) of column {name!r}")
                self.pos += 1
        nullable, inline_pk = True, False
        while not (
            self.is_punct(",")
            or self.is_punct(")")
            or self.at_end()
            or self.is_kw("distributed", "by")
        ):
            if self.accept_kw("not", "null"):
                nullable = False
            elif self.accept_kw("null"):
                nullable = True
            elif self.accept_kw("primary", "key"):
                inline_pk, nullable = True, False
            elif self.accept_kw("default") or self.accept_kw("comment"):
                self.skip_group()
            else:
                raise self.fail(f"unexpected {self.describe()} in definition of column {name!r}")
        try:
            return Column(name, type_name, length, nullable), inline_pk
        except UnknownTypeError as exc:
            raise self.fail(f"column {name!r}: {exc}") from None

    def table_tail(self, *, stop_at_as: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """DISTRIBUTED BY / DATASOURCE_TYPE clauses after the column list, up to the end (or AS)."""
        distributed_by: tuple[str, ...] = ()
        datasource_types: tuple[str, ...] = ()
        while not self.at_end():
            if stop_at_as and self.is_kw("as"):
                break
            if self.accept_punct(")"):
                continue  # the seed's own DDL ends with one ')' too many
            if self.accept_kw("distributed", "by"):
                distributed_by = self.name_list("distribution column")
            elif self.accept_kw("datasource_type"):
                datasource_types = self.datasource_types()
            else:
                # LOGICAL_ONLY and clauses of later Prostore versions: they change no column.
                self.skip_group()
        return distributed_by, datasource_types

    def check_keys(self, columns, primary_key, distributed_by, *, need_pk: bool) -> None:
        if not columns:
            raise self.fail("no column definitions")
        names = [c.name for c in columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise self.fail(f"duplicate column {dupes[0]!r}")
        if need_pk and not primary_key:
            raise self.fail("no PRIMARY KEY")
        for role, keys in (("primary key", primary_key), ("distribution key", distributed_by)):
            for key in keys:
                if key not in names:
                    raise self.fail(f"{role} column {key!r} is not a declared column")

    def rest_after_as(self) -> str:
        tok = self.peek()
        if tok is None or not self.accept_kw("as"):
            raise self.fail(f"expected AS and a query, found {self.describe()}")
        query = self.text[tok.end :].strip()
        return query[:-1].rstrip() if query.endswith(";") else query

    # -- statements
    def statement(self) -> Statement:
        if self.accept_kw("create"):
            or_replace = self.accept_kw("or", "replace")
            if self.accept_kw("table"):
                return self.create_table()
            if self.accept_kw("proxy", "table"):
                # Prostore's CREATE PROXY TABLE (public docs, "CREATE PROXY TABLE"): an unversioned
                # logical table, same clauses; its data travels only in snapshot backups (seed 001
                # line 32), and the lake keeps it like any table.
                return self.create_table()
            if self.accept_kw("materialized", "view"):
                return self.create_view("materialized_view", or_replace)
            if self.accept_kw("view"):
                return self.create_view("view", or_replace)
        elif self.accept_kw("alter", "table"):
            return self.alter_table()
        elif self.accept_kw("alter", "view"):
            return self.create_view("view", True)  # ALTER VIEW redefines the query: a replace
        elif self.accept_kw("drop"):
            if self.accept_kw("table"):
                self.accept_kw("if", "exists")
                return DropTable(*self.qualified_name("table name"))
            if self.accept_kw("materialized", "view"):
                self.accept_kw("if", "exists")
                return DropView(*self.qualified_name("view name"), kind="materialized_view")
            if self.accept_kw("view"):
                self.accept_kw("if", "exists")
                return DropView(*self.qualified_name("view name"))
        words = [t.value.upper() for t in self.toks[:2] if t.kind == "word"]
        return OtherStatement(" ".join(words), self.text.strip())

    def create_table(self) -> CreateTable:
        self.accept_kw("if", "not", "exists")
        datamart, name = self.qualified_name("table name")
        columns, primary_key = self.column_list()
        distributed_by, datasource_types = self.table_tail(stop_at_as=False)
        self.check_keys(columns, primary_key, distributed_by, need_pk=True)
        return CreateTable(datamart, name, columns, primary_key, distributed_by, datasource_types)

    def alter_table(self) -> AlterTable:
        if_exists = self.accept_kw("if", "exists")
        datamart, name = self.qualified_name("table name")
        actions = [self.alter_action()]
        while self.accept_punct(","):
            actions.append(self.alter_action())
        if not self.at_end():
            raise self.fail(f"expected ',' or the end after an ALTER TABLE action, found {self.describe()}")
        return AlterTable(datamart, name, tuple(actions), if_exists)

    def alter_action(self) -> AlterAction:
        if self.accept_kw("add"):
            if self.is_kw("constraint") or self.is_kw("primary", "key"):
                raise self.fail("ALTER TABLE ... ADD of a key or constraint is not supported")
            self.accept_kw("column")
            if_not_exists = self.accept_kw("if", "not", "exists")
            column, inline_pk = self.column_def()
            if inline_pk:
                raise self.fail(f"cannot add primary key column {column.name!r}: "
                                "a table's primary key is fixed when it is created")
            return AddColumn(column, if_not_exists)
        if self.accept_kw("drop"):
            if self.is_kw("constraint") or self.is_kw("primary", "key"):
                raise self.fail("ALTER TABLE ... DROP of a key or constraint is not supported")
            self.accept_kw("column")
            if_exists = self.accept_kw("if", "exists")
            return DropColumn(self.ident("column name"), if_exists)
        if self.accept_kw("rename", "column"):
            old = self.ident("column name")
            if not self.accept_kw("to"):
                raise self.fail(f"expected TO after RENAME COLUMN {old}, found {self.describe()}")
            return RenameColumn(old, self.ident("new column name"))
        if self.at_end():
            raise self.fail("expected an ALTER TABLE action, found end of statement")
        raise self.fail(f"unsupported ALTER TABLE action {self.describe()} "
                        "(known: ADD [COLUMN], DROP [COLUMN], RENAME COLUMN .. TO ..)")

    def create_view(
        self, kind: Literal["view", "materialized_view"], or_replace: bool
    ) -> CreateView:
        self.accept_kw("if", "not", "exists")
        datamart, name = self.qualified_name("view name")
        columns: tuple[Column, ...] = ()
        primary_key = distributed_by = datasource_types = ()
        if kind == "materialized_view" and self.is_punct("("):
            columns, primary_key = self.column_list()
            distributed_by, datasource_types = self.table_tail(stop_at_as=True)
            self.check_keys(columns, primary_key, distributed_by, need_pk=True)
        elif self.is_punct("("):
            self.skip_group()  # a logical view's column-name list: its types come from the query
        query = self.rest_after_as()
        return CreateView(
            datamart, name, kind, query, or_replace, columns, primary_key, distributed_by,
            datasource_types,
        )


def parse_ddl(query: str) -> Statement:
    """Parse one changelog `changeQuery` into a typed statement (see the module docstring)."""
    return _Parser(query).statement()


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
    """
    ordered = sorted(records, key=lambda r: _field(r, "change_num", "changeNum"))
    state: dict[str, EntitySchema] = {}
    for record in ordered:
        change_num = _field(record, "change_num", "changeNum")
        query = _field(record, "change_query", "changeQuery")
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

"""Parser of the DDL in a Prostore changelog, and the schema state it builds.

Each changelog record's `changeQuery` is one DDL statement. `parse_ddl` turns it into a typed
statement: `CreateTable`, `CreateView` (logical or materialized, CREATE OR REPLACE and ALTER VIEW
too), `DropTable`, `DropView`, or `OtherStatement` for anything else (CREATE DATABASE, external
tables, ...), which is kept, never an error. `replay_changelog` applies records in changeNum order
and returns the schema of every live entity, keyed by its unqualified name.

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

from dataclasses import dataclass
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
class OtherStatement:
    """A statement that changes no table or view schema this platform tracks."""

    verb: str  # first words, uppercased, e.g. "CREATE DATABASE"
    query: str


Statement = CreateTable | CreateView | DropTable | DropView | OtherStatement


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
    change_num: int | None = None  # the changelog record that created it

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


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
            if self.accept_kw("materialized", "view"):
                return self.create_view("materialized_view", or_replace)
            if self.accept_kw("view"):
                return self.create_view("view", or_replace)
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
    existing name replaces it; DROP removes it; other statements change nothing.
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
            )
        elif isinstance(stmt, CreateView):
            state[stmt.name] = EntitySchema(
                stmt.datamart, stmt.name, stmt.kind, stmt.columns, stmt.primary_key,
                stmt.distributed_by, stmt.datasource_types, stmt.query, change_num,
            )
        elif isinstance(stmt, (DropTable, DropView)):
            state.pop(stmt.name, None)
    return state

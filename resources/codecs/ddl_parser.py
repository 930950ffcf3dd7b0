"""The DDL parser of a Prostore changelog: `parse_ddl(changeQuery)` -> a typed statement of
`resources/codecs/ddl_statements.py`. What it accepts and how it fails is in
`resources/codecs/ddl.py`'s docstring; the tokenizer is hand-written and never raises (an
unterminated quote just runs to the end)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from resources.codecs.ddl_statements import (AddColumn, AlterAction, AlterTable, CreateTable, CreateView, DropColumn,
                                             DropTable, DropView, OtherStatement, RenameColumn, Statement)
from resources.codecs.types import Column, UnknownTypeError
from resources.errors import DdlParseError


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

"""Prostore's SELECT dialect for sqlglot: table references with FOR SYSTEM_TIME clauses (pure; no
engine, no Dagster).

In: the text of a Prostore query. Out: a sqlglot tree in which every table reference that carried
a clause has it as an `exp.Version` (`this` "SYSTEM_TIME") whose `kind` is one of
- "AS OF DELTA_NUM" (expression: an integer literal),
- "AS OF" (expression: a string literal, the timestamp),
- "STARTED IN" / "FINISHED IN" (expression: a tuple of two integer literals).
The clause stands after the table's name and before its alias, as Prostore writes it
(`marketing.sales FOR SYSTEM_TIME AS OF DELTA_NUM 7 AS s`); keywords in any case.

What it guarantees:
- Prostore's forms the lake cannot answer are refused while parsing, with one line naming the
  form and why (`RefusedFormError`): AS OF LATEST_UNCOMMITTED_DELTA, the CN and TS forms, RAW,
  DATASOURCE_TYPE and ESTIMATE_ONLY.
- Any other text that is not a query fails with `SqlSyntaxError` carrying the line and column
  (1-based) of the token the parser stopped at.
- Only one statement, and only a query (SELECT / WITH / set operations): the lake is read, never
  written, through this path.
"""

from __future__ import annotations

from sqlglot import exp, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from resources.errors import DeltaportError

# The forms deltaport answers, as `exp.Version.kind`.
AS_OF_DELTA, AS_OF_TIME, STARTED_IN, FINISHED_IN = "AS OF DELTA_NUM", "AS OF", "STARTED IN", "FINISHED IN"

# Why each refused form cannot be answered from the lake (one line each).
_WHY = {
    "AS OF LATEST_UNCOMMITTED_DELTA": "the lake holds closed deltas only, never the hot (uncommitted) delta",
    "AS OF CN": "the lake numbers versions by delta, not by Prostore's write operations (CN)",
    "STARTED CN": "the lake numbers versions by delta, not by Prostore's write operations (CN)",
    "FINISHED CN": "the lake numbers versions by delta, not by Prostore's write operations (CN)",
    "STARTED TS": "the lake keeps one version per key and delta, not each write operation's time (TS)",
    "FINISHED TS": "the lake keeps one version per key and delta, not each write operation's time (TS)",
    "RAW": "its meaning is not documented in a form deltaport could check; use STARTED IN / FINISHED IN",
    "DATASOURCE_TYPE": "the lake is the only data source here (Spark or DuckDB over Iceberg), not ADB/ADG/ADQM/ADP",
    "ESTIMATE_ONLY": "Prostore's plan estimate has no meaning on the lake; use --explain for the SQL it runs",
}
_TRAILERS = ("DATASOURCE_TYPE", "ESTIMATE_ONLY")  # clauses Prostore takes after the whole query


class SqlSyntaxError(DeltaportError):
    """The query is not Prostore SQL deltaport can parse; `line` and `column` are 1-based."""

    def __init__(self, reason: str, line: int, column: int):
        self.line, self.column = line, column
        super().__init__(f"syntax error at line {line}, column {column}: {reason}")


class RefusedFormError(DeltaportError):
    """A Prostore form the lake cannot answer; `form` names it."""

    def __init__(self, form: str, line: int | None = None, column: int | None = None):
        self.form = form
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"FOR SYSTEM_TIME {form}{where} is not supported: {_WHY[form]}"
                         if form not in _TRAILERS else f"{form}{where} is not supported: {_WHY[form]}")


class Prostore(Dialect):
    """Prostore's SELECT: the generic dialect plus FOR SYSTEM_TIME before a table's alias."""

    ALIAS_POST_VERSION = True  # `t FOR SYSTEM_TIME ... AS a`, not `t AS a FOR SYSTEM_TIME ...`

    class Tokenizer(tokens.Tokenizer):
        pass

    class Parser(parser.Parser):
        def _parse_version(self) -> exp.Version | None:
            if not self._match_text_seq("FOR", "SYSTEM_TIME"):
                return None
            at = self._curr
            if self._match_text_seq("AS", "OF"):
                if self._match_text_seq("DELTA_NUM"):
                    return self._version(AS_OF_DELTA, self._delta_number())
                for refused in ("LATEST_UNCOMMITTED_DELTA", "CN"):
                    if self._match_text_seq(refused):
                        raise _refused(f"AS OF {refused}", at)
                if self._curr is not None and self._curr.token_type == tokens.TokenType.STRING:
                    self._advance()
                    return self._version(AS_OF_TIME, exp.Literal.string(self._prev.text))
                self.raise_error("FOR SYSTEM_TIME AS OF takes DELTA_NUM n or a 'YYYY-MM-DD hh:mm:ss' timestamp")
            for kind in ("STARTED", "FINISHED"):
                if self._match_text_seq(kind):
                    for refused in ("CN", "TS"):
                        if self._match_text_seq(refused):
                            raise _refused(f"{kind} {refused}", at)
                    if not self._match(tokens.TokenType.IN):
                        self.raise_error(f"FOR SYSTEM_TIME {kind} takes IN (delta_num1, delta_num2)")
                    return self._version(f"{kind} IN", self._delta_pair(kind))
            if self._match_text_seq("RAW"):
                raise _refused("RAW", at)
            self.raise_error("FOR SYSTEM_TIME takes AS OF DELTA_NUM n, AS OF '<timestamp>', "
                             "STARTED IN (a, b) or FINISHED IN (a, b)")
            return None

        def _version(self, kind: str, expression: exp.Expr) -> exp.Version:
            return self.expression(exp.Version(this="SYSTEM_TIME", kind=kind, expression=expression))

        def _delta_number(self) -> exp.Literal:
            if self._curr is None or self._curr.token_type != tokens.TokenType.NUMBER or not self._curr.text.isdigit():
                self.raise_error("a delta number (0, 1, 2, ...) expected")
            self._advance()
            return exp.Literal.number(int(self._prev.text))

        def _delta_pair(self, kind: str) -> exp.Tuple:
            if not self._match(tokens.TokenType.L_PAREN):
                self.raise_error(f"FOR SYSTEM_TIME {kind} IN takes (delta_num1, delta_num2)")
            first = self._delta_number()
            if not self._match(tokens.TokenType.COMMA):
                self.raise_error(f"FOR SYSTEM_TIME {kind} IN takes two delta numbers")
            last = self._delta_number()
            if not self._match(tokens.TokenType.R_PAREN):
                self.raise_error("')' expected")
            return exp.Tuple(expressions=[first, last])

        # DATASOURCE_TYPE = '...' and ESTIMATE_ONLY close a Prostore query; without this they
        # would read as an alias of the last table or column and fail as stray tokens after it.
        def _parse_table_alias(self, *args, **kwargs):
            return None if self._at_trailer() else super()._parse_table_alias(*args, **kwargs)

        def _parse_alias(self, this, explicit: bool = False):
            return this if self._at_trailer() else super()._parse_alias(this, explicit)

        def _parse_statement(self):
            statement = super()._parse_statement()
            if self._at_trailer():
                raise _refused(self._curr.text.upper(), self._curr)
            return statement

        def _at_trailer(self) -> bool:
            return self._curr is not None and self._curr.text.upper() in _TRAILERS


def _refused(form: str, token) -> RefusedFormError:
    return RefusedFormError(form, *((token.line, token.col - len(token.text) + 1) if token is not None else ()))


def parse_query(sql: str) -> exp.Query:
    """The Prostore query `sql` as a sqlglot tree (module docstring); `SqlSyntaxError` with the
    position where it is not SQL, `RefusedFormError` for a form the lake cannot answer."""
    dialect = Prostore()
    try:
        trees = dialect.parse(sql)
    except TokenError:
        raise _token_error(dialect, sql) from None
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        raise SqlSyntaxError(first.get("description") or str(err).splitlines()[0],
                             first.get("line") or 1, _start_column(first)) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise SqlSyntaxError(f"one query expected, got {len(trees)} statements", 1, 1)
    if not isinstance(trees[0], exp.Query):
        raise SqlSyntaxError(f"a SELECT query expected, got {trees[0].key.upper()}", 1, 1)
    return trees[0]


def _start_column(error: dict) -> int:
    """The 1-based column where the highlighted token starts (sqlglot reports where it ends)."""
    end = error.get("col") or 1
    return max(1, end - len(error.get("highlight") or "") + 1)


def _token_error(dialect: Dialect, sql: str) -> SqlSyntaxError:
    """Where the text stops being tokens: an unclosed quote or comment. sqlglot's tokenizer says
    only which stretch of text failed, so the shortest failing prefix is found by bisection (on
    the error path only); its last character opens what was never closed."""
    good, bad = 0, len(sql)
    while bad - good > 1:
        mid = (good + bad) // 2
        try:
            dialect.tokenize(sql[:mid])
            good = mid
        except TokenError:
            bad = mid
    offset = bad - 1
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return SqlSyntaxError(f"{sql[offset]!r} opened here is never closed", line, column)

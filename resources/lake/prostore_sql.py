"""A Prostore query rewritten into SQL on the lake's tables (pure: no engine, no Dagster).

In: a query parsed by `resources.lake.prostore_dialect.parse_query` and a `LakeInfo` (what the
lake knows of its tables: kinds, columns, last landed deltas, history starts, close times). Out:
a `Plan`: the query with every lake table reference replaced by a subquery, and the `Scan`s
(lake tables) those subqueries read, for an engine to render (`Plan.sql`) and run.

Each reference `dm.t [FOR SYSTEM_TIME form] [alias]` becomes `(subquery) AS alias` (the alias
defaults to the table's name, so `t.col` still resolves), the subquery giving the table's data
columns only (Prostore's rewrite projects the logical columns: `sys_from`, `sys_to`, `sys_op`
are not returned):
- a datamart's or change stream's table, on the union `H` of its current table `lake.dm.t` and
  its history table `lake.dm_history.t`, with the WHERE the docs give per form
  (`resources/lake/history_forms.py`, README "Querying history"):
  no clause and `AS OF DELTA_NUM n` with n at or after the table's own newest delta: the current
  table alone; an earlier `AS OF DELTA_NUM n`: `H` where the version was current at n, or,
  where the history does not answer n, the snapshot of the table's tag `delta_<n>` or of its
  newest tag before n (`Scan.snapshot_id`: a delta that left the table alone has no tag of its
  own; no tag before n: no rows); `AS OF '<ts>'`: `AS OF DELTA_NUM` of the last delta
  closed at or before ts (GET_DELTA_BY_DATETIME; none: no rows, as Prostore); `STARTED IN
  (a, b)`: `H` where the version began in a..b; `FINISHED IN (a, b)`: the history table where a
  delete in a..b closed the version. Columns: the table's DDL as of the form's delta (n, b, or
  the last landed), matched by name; a version that never had a column reads NULL. A change
  stream's current table keeps deletes as tombstones: they are left out.
  A datamart's TIME columns (the lake keeps microseconds since midnight) are the engine's TIME in
  the subquery (`_as_times`), so a WHERE on a time literal, MIN/MAX and the rows are a TIME's.
- a user mart `<source>_marts.<asset>` (partitioned by `delta_num`): `AS OF DELTA_NUM n` reads
  partition n, no clause the last landed partition, `AS OF '<ts>'` the partition of the delta
  closed then; STARTED IN / FINISHED IN are refused (a mart keeps a state per delta, not versions).

Which delta has landed is the source's L (`LakeInfo.last_landed`: its manifest's mark), not the
table's own newest delta R: a delta commits only to the tables it changes, so a table no delta
after R changed is, as of any delta from R to L, the table as it is (`AS OF DELTA_NUM n`, n >= R:
the current table alone, no history needed).
Guarantees: the history is read up to R only (a run in flight, or one that died between its
history commit and its MERGE, is never half-seen; a delta above L whose MERGE did land is never
read as of a delta <= L); a form the history does not answer exactly (`HistoryNotKeptError`) or
a delta above L is an error, never fewer rows. Each `Scan.row_filter` is implied by the WHERE around it in the SQL: an engine may
use it to prune files, never to change the answer. A subquery gives only the columns the query
names somewhere (any table's: a superset; all of them under `*`, `t.*` or a NATURAL join), and
`Scan.columns` are the ones its SQL reads, so an engine reads no other column from the files.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sqlglot import exp

from resources.errors import DeltaportError
from resources.lake.history_forms import (
    LIVE,
    AsOfDelta,
    FinishedIn,
    Form,
    StartedIn,
    check_covered,
    covers,
    delta_at,
    history_where,
)
from resources.lake.prostore_dialect import AS_OF_DELTA, AS_OF_TIME, FINISHED_IN, STARTED_IN, parse_query

DATAMART, STREAM, MART = "datamart", "stream", "mart"


class UnknownLakeTableError(DeltaportError):
    """A table reference the lake does not hold, or one not named SOURCE.TABLE."""


class DeltaNotLandedError(DeltaportError):
    """A form asks about a delta the table has not landed."""


class LakeInfo(Protocol):
    """What the rewrite needs to know of the lake (resources/lake/sql_lake.py reads it with PyIceberg)."""

    def source_kind(self, source: str) -> str | None:
        """DATAMART or STREAM for a configured source, else None."""

    def table_columns(self, namespace: str, table: str) -> list[str] | None:
        """The lake table's columns in order, or None when it does not exist."""

    def ddl_columns(self, datamart: str, table: str, delta: int) -> list[str]:
        """A datamart table's columns as its DDL declares them after `delta`."""

    def ddl_times(self, datamart: str, table: str, delta: int) -> list[str]:
        """Those of `ddl_columns` whose DDL type is TIME (the lake stores microseconds since midnight)."""

    def last_landed(self, namespace: str, table: str) -> int:
        """L: the source's landed delta, the bound of every form (a lake's mark on the source's
        manifest; a lake written before it: the table's newest recorded delta; a mart: its last
        partition)."""

    def recorded(self, namespace: str, table: str) -> int:
        """R: the newest delta recorded in the table (its tags and commits). A table no delta
        after R changed is as it is for every delta from R on; the history is read up to R."""

    def snapshot_as_of(self, namespace: str, table: str, delta: int) -> tuple[int, list[str]] | None:
        """(snapshot id, that snapshot's columns) holding the table as of `delta`, a delta before
        its own newest that its history does not answer: its tag `delta_<N>`, or the newest tag
        before N (a delta that left the table alone has none: `as_of` rules 5-7). None: the
        table had no rows then. Raises `HistoryNotKeptError` where no snapshot alone holds it
        (inside a range run's commit)."""

    def history_start(self, source: str, table: str) -> int | None:
        """The first delta whose closed versions the history holds (None: none kept)."""

    def close_times(self, source: str) -> Mapping[int, dt.datetime]:
        """{delta: close time, naive UTC} of the source's landed deltas."""


@dataclass(frozen=True)
class Scan:
    """One lake table a plan reads, named `name` in the plan's SQL."""

    name: str
    namespace: str
    table: str
    row_filter: str = "true"  # implied by the SQL's own WHERE on this table (module docstring)
    columns: tuple[str, ...] = ()  # the columns the SQL reads from it (the filter's may be more)
    snapshot_id: int | None = None  # a snapshot of the table (a tag's), None: the current one


@dataclass
class Plan:
    tree: exp.Query
    scans: list[Scan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how a reference was resolved (AS OF a time: which delta)
    reads_times: bool = False  # a TIME column is turned into the engine's TIME (`_time_of`)

    def sql(self, dialect: str, table_of: Callable[[Scan], exp.Table], *, pretty: bool = False) -> str:
        """The plan's SQL in `dialect` (sqlglot's name: "spark", "duckdb"), each scan's placeholder
        replaced by the table `table_of` gives for it."""
        by_name = {s.name: s for s in self.scans}

        def swap(node):
            if isinstance(node, exp.Table) and not node.args.get("db") and node.name in by_name:
                return table_of(by_name[node.name])
            if isinstance(node, exp.Anonymous) and node.name == _MICROS_TO_TIME:
                return _time_of(node.expressions[0], dialect)
            return node

        return self.tree.transform(swap).sql(dialect=dialect, pretty=pretty)


def rewrite_sql(sql: str, lake: LakeInfo) -> Plan:
    """`rewrite(parse_query(sql), lake)`."""
    return rewrite(parse_query(sql), lake)


def rewrite(tree: exp.Query, lake: LakeInfo) -> Plan:
    """The plan answering `tree` on the lake (module docstring)."""
    tree = tree.copy()
    plan = Plan(tree)
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    needed = _named_columns(tree)
    for table in list(tree.find_all(exp.Table)):
        if not table.args.get("db") and table.name.lower() in ctes:
            continue  # a WITH query's name, not a lake table
        if table.args.get("catalog") or not table.args.get("db") or not isinstance(table.this, exp.Identifier):
            raise UnknownLakeTableError(f"{table.sql()}: name a lake table as DATAMART.TABLE "
                                        "(or SOURCE_marts.ASSET for a user mart)")
        version = table.args.get("version")
        subquery = _Reference(lake, plan, table.db, table.name, version, needed).subquery()
        table.replace(exp.Subquery(this=subquery, alias=exp.TableAlias(
            this=exp.to_identifier(table.alias or table.name, quoted=True))))
    return plan


@dataclass
class _Reference:
    """One table reference and how it is answered."""

    lake: LakeInfo
    plan: Plan
    namespace: str
    table: str
    version: exp.Version | None
    needed: frozenset[str] | None  # lower-case column names the query names; None: it may use any
    times: frozenset[str] = frozenset()  # the DDL's TIME columns (a datamart's): stored as microseconds

    def label(self) -> str:
        return f"{self.namespace}.{self.table}" + (f" FOR SYSTEM_TIME {_form_text(self.version)}" if self.version else "")

    def subquery(self) -> exp.Select:
        kind = self.lake.source_kind(self.namespace)
        if kind is not None:
            return self._as_times(self._versions(kind))
        if self.namespace.endswith("_marts") and self.lake.source_kind(self.namespace[:-len("_marts")]):
            return self._mart(self.namespace[:-len("_marts")])
        raise UnknownLakeTableError(f"{self.namespace}.{self.table}: {self.namespace!r} is neither a source of the "
                                    "config nor a source's marts (<source>_marts)")

    # --- a datamart's or a change stream's table -----------------------------------------------
    def _versions(self, kind: str) -> exp.Select:
        source, table = self.namespace, self.table
        current_columns = self.lake.table_columns(source, table)
        if current_columns is None:
            raise UnknownLakeTableError(f"{source}.{table} is not a table of the lake")
        last = self.lake.last_landed(source, table)  # L: what has landed, for the whole source
        form = self._form(source, last)
        delta = last if form is None else form.delta if isinstance(form, AsOfDelta) else form.last
        if delta > last:
            raise DeltaNotLandedError(f"{self.label()}: delta {delta} has not landed in {source}.{table} "
                                      f"(last landed: {last})")
        if delta < 0:  # AS OF a time before the first close: no rows, as Prostore answers it
            columns = self._columns(kind, source, table, last, current_columns)
            return self._read(source, table, current_columns, "false", columns, "false")
        columns = self._columns(kind, source, table, delta, current_columns)
        live = LIVE if kind == STREAM else None
        # R, the table's own newest delta: a delta that left the table alone committed nothing to
        # it (docs/how-it-works.md, "Reading a table as of a delta"), so from R on it is as it is.
        recorded = self.lake.recorded(source, table)
        if form is None or (isinstance(form, AsOfDelta) and form.delta >= recorded):
            return self._read(source, table, current_columns, live or "true", columns, live)
        start = self.lake.history_start(source, table)
        if isinstance(form, AsOfDelta) and not covers(start, form):  # a tag's snapshot answers
            return self._tagged(source, table, form.delta, current_columns, columns, live)
        check_covered(source, table, start, form)
        history_columns = self.lake.table_columns(f"{source}_history", table)
        bound = f"delta_num <= {int(recorded)}"
        if isinstance(form, FinishedIn):  # the history table alone: a current version finished nothing
            if history_columns is None:
                return self._read(source, table, current_columns, "false", columns, "false")
            return self._read(f"{source}_history", table, history_columns, f"{history_where(form)} AND {bound}",
                              columns, f"{form.where()} AND {bound}")
        current = self._read(source, table, current_columns, _and(form.current_where(), live), [*columns, "sys_from"],
                             live, extra=[exp.alias_(exp.cast(exp.Null(), "BIGINT"), "sys_to"),
                                          exp.alias_(exp.Literal.number(0), "sys_op")])
        union: exp.Query = current
        if history_columns is not None:
            closed = self._read(f"{source}_history", table, history_columns, f"{history_where(form)} AND {bound}",
                                [*columns, "sys_from", "sys_to", "sys_op"], bound)
            union = exp.union(current, closed, distinct=False)
        return (exp.select(*[exp.column(c, quoted=True) for c in columns])
                .from_(exp.Subquery(this=union, alias=exp.TableAlias(this=exp.to_identifier("h"))))
                .where(exp.condition(form.where())))

    def _tagged(self, source: str, table: str, delta: int, current_columns: list[str], columns: list[str],
                live: str | None) -> exp.Select:
        """The table as of `delta` from the snapshot of a tag (its own, or the newest before it):
        in that snapshot's columns, a change stream's live rows only; no rows when it had none."""
        found = self.lake.snapshot_as_of(source, table, delta)
        if found is None:
            return self._read(source, table, current_columns, "false", columns, "false")
        snapshot_id, have = found
        return self._read(source, table, have, live or "true", columns, live, snapshot_id=snapshot_id)

    def _form(self, source: str, last: int) -> Form | None:
        if self.version is None:
            return None
        kind, value = self.version.args["kind"], self.version.expression
        if kind == AS_OF_DELTA:
            return AsOfDelta(int(value.name))
        if kind == AS_OF_TIME:
            return AsOfDelta(self._delta_at(source, value.name))
        first, last_ = (int(v.name) for v in value.expressions)
        if first > last_:
            raise DeltaportError(f"{self.label()}: invalid delta range ({first} > {last_})")
        return (StartedIn if kind == STARTED_IN else FinishedIn)(first, last_)

    def _delta_at(self, source: str, text: str) -> int:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise DeltaportError(f"{self.label()}: the time must read 'YYYY-MM-DD hh:mm:ss', got {text!r}") from None
        if when.tzinfo is not None:
            when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
        delta = delta_at(self.lake.close_times(source), when)
        self.plan.notes.append(f"{self.label()}: " + (f"delta {delta}, the last closed at or before it (UTC)"
                                                     if delta is not None else "no delta closed by then: no rows"))
        return -1 if delta is None else delta

    def _columns(self, kind: str, source: str, table: str, delta: int, current: list[str]) -> list[str]:
        if kind == DATAMART:
            self.times = frozenset(self.lake.ddl_times(source, table, delta))
            return self._pruned(self.lake.ddl_columns(source, table, delta))
        return self._pruned([c for c in current if c not in _STREAM_SYSTEM])

    def _as_times(self, query: exp.Select) -> exp.Select:
        """`query` with its TIME columns (microseconds in the lake) turned into the engine's TIME,
        so that a user's `WHERE t > '12:00:00'`, MIN(t) and the printed rows are those of a TIME."""
        names = [s.alias_or_name for s in query.selects]
        if not any(n in self.times for n in names):
            return query
        self.plan.reads_times = True
        return exp.select(*[exp.alias_(_micros_to_time(exp.column(n, quoted=True)), n, quoted=True)
                            if n in self.times else exp.column(n, quoted=True) for n in names]).from_(
            exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("v"))))

    # --- a user mart ---------------------------------------------------------------------------
    def _mart(self, source: str) -> exp.Select:
        columns = self.lake.table_columns(self.namespace, self.table)
        if columns is None:
            raise UnknownLakeTableError(f"{self.namespace}.{self.table} is not a mart of the lake")
        kind = self.version.args["kind"] if self.version is not None else None
        if kind in (STARTED_IN, FINISHED_IN):
            raise DeltaportError(f"{self.label()}: a mart keeps one state per delta, not row versions; "
                                 "STARTED IN / FINISHED IN apply to a source's tables")
        if kind == AS_OF_DELTA:
            delta = int(self.version.expression.name)
        elif kind == AS_OF_TIME:
            delta = self._delta_at(source, self.version.expression.name)
        else:
            delta = self.lake.last_landed(self.namespace, self.table)
        where = f"delta_num = {int(delta)}"
        return self._read(self.namespace, self.table, columns, where,
                          self._pruned([c for c in columns if c != "delta_num"]), where)

    def _pruned(self, columns: list[str]) -> list[str]:
        """`columns` less those the query never names (at least one, for a row count)."""
        kept = columns if self.needed is None else [c for c in columns if c.lower() in self.needed]
        return kept or columns[:1]

    def _read(self, namespace: str, table: str, have: list[str], row_filter: str, columns: list[str],
              where: str | None, extra=(), snapshot_id: int | None = None) -> exp.Select:
        """SELECT `columns` (the table's own spelling where it has them, else NULL) FROM a new scan
        of the table (of its snapshot `snapshot_id`, else the current one), WHERE `where`; the
        scan reads the columns this SELECT names, nothing else."""
        by_lower = {c.lower(): c for c in have}
        picked = [exp.alias_(exp.column(by_lower[c.lower()], quoted=True), c, quoted=True) if c.lower() in by_lower
                  and by_lower[c.lower()] != c else exp.column(c, quoted=True) if c.lower() in by_lower
                  else exp.alias_(exp.Null(), c, quoted=True) for c in columns]
        name = f"__scan_{len(self.plan.scans)}"
        query = exp.select(*picked, *extra).from_(exp.Table(this=exp.to_identifier(name)))
        query = query.where(exp.condition(where)) if where else query
        used = {c.name.lower() for c in query.find_all(exp.Column)}
        self.plan.scans.append(Scan(name, namespace, table, row_filter, tuple(c for c in have if c.lower() in used),
                                    snapshot_id))
        return query


# A TIME column's stored microseconds since midnight as the engine's TIME: a placeholder function
# in the plan's tree, written per dialect by `Plan.sql` (`_time_of`).
_MICROS_TO_TIME = "__DELTAPORT_MICROS_TO_TIME"


def _micros_to_time(column: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=_MICROS_TO_TIME, expressions=[column])


_TIME_OF = {  # x: bigint microseconds since midnight, 0 <= x < 86,400,000,000
    "duckdb": "CAST('00:00:00' AS TIME) + TO_MICROSECONDS(CAST(__x AS BIGINT))",
    # Spark 4.1's TIME (spark.sql.timeType.enabled on the session: resources/lake/sql_engines.py)
    "spark": "MAKE_TIME(CAST(__x DIV 3600000000 AS INT), CAST(__x DIV 60000000 % 60 AS INT), "
             "CAST(__x % 60000000 AS DECIMAL(16, 6)) / 1000000)",
}


def _time_of(value: exp.Expression, dialect: str) -> exp.Expression:
    if dialect not in _TIME_OF:
        raise DeltaportError(f"no TIME conversion is known for the {dialect} dialect")
    template = exp.maybe_parse(_TIME_OF[dialect], dialect=dialect)
    return template.transform(lambda n: value.copy() if isinstance(n, exp.Column) and n.name == "__x" else n)


# A change stream's snapshot-table columns that are the lake's own, not the stream's data.
_STREAM_SYSTEM = ("_order", "_tombstone", "_event_time_us", "sys_from", "sys_from_date")


def _named_columns(tree: exp.Query) -> frozenset[str] | None:
    """The column names `tree` names anywhere (lower case), or None when it may use a column it
    does not name: `*` or `t.*` in a projection, a NATURAL join. A name counts for every table,
    so a table keeps a column another table's reference named: more than needed, never less."""
    for star in tree.find_all(exp.Star):
        if not isinstance(star.parent, exp.Func):  # count(*) reads no column
            return None
    names = {c.name.lower() for c in tree.find_all(exp.Column)}
    for join in tree.find_all(exp.Join):
        if join.args.get("method") == "NATURAL" or join.args.get("kind") == "NATURAL":
            return None
        names |= {i.name.lower() for i in join.args.get("using") or []}
    return frozenset(names)


def _and(clause: str, other: str | None) -> str:
    return clause if other is None else f"({clause}) AND ({other})"


def _form_text(version: exp.Version) -> str:
    value = version.expression
    if isinstance(value, exp.Tuple):
        return f"{version.args['kind']} ({', '.join(v.sql() for v in value.expressions)})"
    return f"{version.args['kind']} {value.sql()}"

"""One Iceberg view per history-kept table: `lake.<src>_versions.<t>`, the union `H` of its versions.

What flows: when a snapshot step changes a table's columns (the table is created, or a delta's
DDL adds a column or widens a type: `ensure_table` reports it), the step replaces the table's
view, before its data commits, with `CREATE OR REPLACE VIEW` over the two tables as they now are
(`follow_columns`, called by resources/lake/prostore_snapshot.py for a datamart's tables and
resources/lake/cdc.py for a change stream's): the current
versions of `lake.<src>.<t>` and the closed ones of `lake.<src>_history.<t>` (the columns and
the forms are in `resources/lake/history_forms.py`). Any engine with Iceberg views (Spark; Trino
reads a view only in its own dialect) then writes the documented WHERE of each FOR SYSTEM_TIME
form on the view, without knowing the union.

Guarantees:
- the view's columns are the snapshot table's (every column it ever had: a dropped one stays)
  then `sys_from`, `sys_from_date`, `sys_to`, `sys_op`, `sys_close_date`, `delta_num` (the
  history's partition; null for a current version), and `H` holds what the rewrite of
  `deltaport sql` reads (resources/lake/prostore_sql.py): a history column the snapshot table
  has but the history table does not yet reads NULL, as the rewrite reads it;
- written only when the columns changed, never per delta: a delta that changes no column costs
  nothing more (the view names the tables, not a snapshot of them);
- only on catalogs that keep views (`catalog_keeps_views`: JDBC, REST); a Hadoop catalog keeps
  none and gets none (docs/from-prostore.md says what it gets instead);
- the view reads the history as committed: while a delta's snapshot step runs (between its
  history commit and its MERGE), or after a run died between them, add `AND (delta_num IS NULL
  OR delta_num <= R)`, R the table's own newest delta (its newest `delta_<M>` tag or its current
  snapshot's `deltaport.delta`), as `deltaport sql` does. Whether a delta has landed at all is
  the source's L, read from `lake.<src>_meta.manifest`'s `deltaport.landed-through` (a lake
  written before it: the table's newest tag), not from any one table: a delta commits only to
  the tables it changes (docs/using.md, "As of a delta from another engine").
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from resources.lake.history_forms import LIVE

VIEW_SUFFIX = "_versions"
# Catalog types whose Iceberg catalog implements views (the JDBC one at its schema V1, which
# resources/spark/session.py `catalog_conf` asks for).
VIEW_CATALOGS = ("jdbc", "rest")
# The view's system columns, after the data columns, with the type a current version's NULL takes.
SYSTEM = (("sys_from", "BIGINT"), ("sys_from_date", "TIMESTAMP_NTZ"), ("sys_to", "BIGINT"), ("sys_op", "INT"),
          ("sys_close_date", "TIMESTAMP_NTZ"), ("delta_num", "BIGINT"))
# A current version's values of the system columns the snapshot table does not hold.
CURRENT = {"sys_to": "CAST(NULL AS BIGINT)", "sys_op": "0", "sys_close_date": "CAST(NULL AS TIMESTAMP_NTZ)",
           "delta_num": "CAST(NULL AS BIGINT)"}
# A change stream's snapshot-table columns that are the lake's own, not the stream's data.
STREAM_OWN = ("_order", "_tombstone", "_event_time_us")


def catalog_keeps_views(catalog_type: str) -> bool:
    return catalog_type in VIEW_CATALOGS


def view_ident(catalog: str, source: str, table: str) -> str:
    return f"{catalog}.{source}{VIEW_SUFFIX}.{table}"


def versions_view_sql(current: str, history: str, columns: Sequence[tuple[str, str]],
                      history_columns: Sequence[str], *, stream: bool = False) -> str:
    """The SELECT of `H` (Spark SQL). `current`, `history`: the two tables' identifiers;
    `columns`: the snapshot table's [(name, Spark SQL type)]; `history_columns`: the history
    table's names. A stream's current side leaves out its tombstones (they are not versions)."""
    names = {c.lower() for c in history_columns}
    own = {"sys_from", "sys_from_date", *(STREAM_OWN if stream else ())}
    data = [(c, t) for c, t in columns if c.lower() not in own]
    have = {c.lower(): t for c, t in columns}

    def side(system: dict[str, str], present) -> str:
        def pick(c: str, t: str) -> str:
            if c in system:
                return f"{system[c]} AS {_q(c)}"
            return _q(c) if present(c) else f"CAST(NULL AS {t}) AS {_q(c)}"

        return ", ".join(pick(c, t) for c, t in [*data, *SYSTEM])

    now = f"SELECT {side(CURRENT, lambda c: c.lower() in have)} FROM {_ident(current)}"
    if stream:
        now += f" WHERE {LIVE}"
    closed = f"SELECT {side({}, lambda c: c.lower() in names)} FROM {_ident(history)}"
    return f"{now}\nUNION ALL\n{closed}"


def follow_columns(spark, layout, source: str, table: str, *, keep_history: bool, stream: bool = False) -> None:
    """A snapshot table's columns changed (created, a column added or widened): its history table
    takes them and its view is replaced now, before the step's data commits: a step that dies
    after those leaves no stale view behind (its re-run finds the columns changed already and does
    not come here). The window left is a death between the column change's own commit and these
    catalog calls: the view keeps the old columns until the table's next column change. Called on
    a column change only: never per delta."""
    if not (keep_history and layout.versions_views):
        return
    from resources.lake.prostore_history import ensure_history_table

    # the history table too: a new table's first delta may close nothing, and the view names it
    ensure_history_table(spark, layout, source, table, spark.table(f"{layout.catalog}.{source}.{table}").schema)
    replace_versions_view(spark, layout.catalog, source, table, stream=stream)


def replace_versions_view(spark, catalog: str, source: str, table: str, *, stream: bool = False) -> str | None:
    """Create or replace the view of `source.table` from the two tables' schemas now (module
    docstring); its identifier, or None when the history table does not exist yet."""
    from resources.spark.iceberg import table_exists

    current, history = f"{catalog}.{source}.{table}", f"{catalog}.{source}_history.{table}"
    if not table_exists(spark, history):
        return None
    fields = spark.table(current).schema.fields
    history_names = spark.table(history).columns
    view = view_ident(catalog, source, table)
    namespace = view.rsplit(".", 1)[0]
    with _lock:  # tables of one source step side by side; a JDBC catalog's IF NOT EXISTS races
        if namespace not in _namespaces:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {_ident(namespace)}")
            _namespaces.add(namespace)
    sql = versions_view_sql(current, history, [(f.name, f.dataType.simpleString()) for f in fields],
                            history_names, stream=stream)
    spark.sql(f"CREATE OR REPLACE VIEW {_ident(view)} AS {sql}")
    return view


_lock = threading.Lock()
_namespaces: set[str] = set()  # view namespaces this process has made sure of


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ident(ident: str) -> str:
    return ".".join(_q(p) for p in ident.split("."))

"""Any deltaport lake table read from plain Python with PyIceberg: no JVM, no Spark, no Dagster.

In: a catalog as deltaport's config gives it (type, warehouse, uri, properties; secrets already
resolved) and a table name (`ns.table`, or `catalog.ns.table`). Out: a PyIceberg `Table`, and
from it `pyarrow.Table`s (so pandas, Polars or DuckDB via Arrow) of:
- the current state (`read_current`),
- the state right after delta N (`read_delta`): the snapshot `as_of.resolve_as_of` picks
  (`resolve`) from the table's metadata (its tags `delta_tags`, folded commits `folded_deltas`,
  history start `history_from`, newest recorded delta `last_delta`) and the source's landed
  delta (`lake_mark`: its manifest's `deltaport.landed-through`): its own tag `delta_<N>`, the
  table as it is when no delta after N changed it, or the newest tag before N (a delta commits
  only to the tables it changes),
- any Prostore FOR SYSTEM_TIME form over the history (`read_history`, the forms and their WHERE
  texts are `resources.lake.history_forms`).

Catalogs:
- `hadoop` (the embedded default): PyIceberg has no Hadoop catalog, but a Hadoop table is its
  folder, so the table is opened from its newest metadata file as a `StaticTable`. "Newest" is
  found the way Iceberg's own HadoopTableOperations finds it: the version in
  `metadata/version-hint.text` (or, without one, the highest `vN.metadata.json` in a local
  folder), then every next `v<N+1>` that exists (a writer that died between writing v<N+1> and
  the hint, or one that committed while we looked). A metadata file is written once and never
  changed (Iceberg renames it into place), so the read is of one consistent snapshot.
- `jdbc`: PyIceberg's `SqlCatalog` on the same database (the JDBC URL and `jdbc.user` /
  `jdbc.password` turned into SQLAlchemy's URL; PostgreSQL and SQLite). It never creates or
  migrates the catalog's tables: a reader that finds none fails instead of making some.
- `rest` and `hive`: PyIceberg's own catalogs, uri and properties passed through (hive needs
  `pyiceberg[hive]`, which deltaport does not install).

Scans apply merge-on-read position deletes (deltaport's snapshot tables are format 2,
merge-on-read) as Spark does; tests/integration/test_pyiceberg_read.py compares them with Spark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote

from resources.errors import DeltaportError
from resources.lake.as_of import (
    LANDED_PROPERTY,
    Absent,
    Current,
    FromFold,
    FromTag,
    Resolution,
    resolve_as_of,
    source_landed,
)
from resources.lake.history_forms import HISTORY_FROM_PROPERTY, Form, history_where

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

TAG_PREFIX = "delta_"  # resources.spark.iceberg.delta_tag's names
DELTA_PROPERTY = "deltaport.delta"  # resources.spark.iceberg.DELTA_PROPERTY: a commit's delta
DELTAS_PROPERTY = "deltaport.deltas"  # resources.spark.iceberg.DELTAS_PROPERTY: every delta a commit replaced
# Catalog properties that name Java classes or JDBC settings: meaningless to PyIceberg.
_JAVA_ONLY = ("io-impl", "catalog-impl", "client.factory")


class PyIcebergReadError(DeltaportError):
    """A lake table could not be opened or read with PyIceberg as asked."""


class NoSuchLakeTableError(PyIcebergReadError):
    """The catalog holds no such table (a history table before any version closed, say)."""


def load_table(ident: str, *, type: str, catalog: str = "lake", warehouse: str | None = None,
               uri: str | None = None, properties: Mapping[str, str] | None = None) -> Table:
    """The Iceberg table `ident` (``ns.table``, or ``<catalog>.ns.table``) of the catalog
    deltaport's config describes. Raises `PyIcebergReadError` for a catalog PyIceberg cannot
    open and for a missing table."""
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    if type == "hadoop":
        if not warehouse:
            raise PyIcebergReadError("a hadoop catalog needs its warehouse folder")
        return _hadoop_table(warehouse, _parts(ident, catalog), props)
    return load_from(open_catalog(type=type, catalog=catalog, warehouse=warehouse, uri=uri, properties=props),
                     ident)


def load_from(catalog, ident: str) -> Table:
    """The table `ident` of a PyIceberg catalog `open_catalog` made (reuse one for many tables)."""
    from pyiceberg.exceptions import NoSuchTableError

    parts = _parts(ident, catalog.name)
    try:
        return catalog.load_table(".".join(parts))
    except NoSuchTableError as exc:
        raise NoSuchLakeTableError(f"{catalog.name}.{'.'.join(parts)} does not exist in the "
                                   f"{type(catalog).__name__}: {exc}") from exc


def _parts(ident: str, catalog: str) -> list[str]:
    parts = ident.split(".")
    if len(parts) == 3 and parts[0] == catalog:
        parts = parts[1:]
    if len(parts) < 2 or not all(parts):
        raise PyIcebergReadError(f"a lake table is named ns.table (or {catalog}.ns.table), got {ident!r}")
    return parts


def open_catalog(*, type: str, catalog: str = "lake", warehouse: str | None = None, uri: str | None = None,
                 properties: Mapping[str, str] | None = None):
    """PyIceberg's catalog for a deltaport `jdbc`, `rest` or `hive` catalog (a hadoop
    warehouse has none: `load_table` opens its tables directly)."""
    from pyiceberg.catalog import load_catalog

    props = {k: str(v) for k, v in (properties or {}).items() if k not in _JAVA_ONLY}
    if warehouse:
        props["warehouse"] = warehouse
    if type == "jdbc":
        if not uri:
            raise PyIcebergReadError("a jdbc catalog needs its uri (jdbc:postgresql://... or jdbc:sqlite:...)")
        from pyiceberg.catalog.sql import SqlCatalog

        url = sqlalchemy_url(uri, props)
        rest = {k: v for k, v in props.items() if not k.startswith("jdbc.")}
        # The catalog name is the rows' catalog_name, as Java's JdbcCatalog wrote them.
        return SqlCatalog(catalog, uri=url, init_catalog_tables="false", **rest)
    if type in ("rest", "hive"):
        if uri:
            props["uri"] = uri
        return load_catalog(catalog, type=type, **props)
    raise PyIcebergReadError(f"PyIceberg opens hadoop, jdbc, rest and hive catalogs, not {type!r}")


def sqlalchemy_url(jdbc_uri: str, properties: Mapping[str, str]) -> str:
    """SQLAlchemy's URL of the database a JDBC URL names: ``jdbc:postgresql://host:port/db?q``
    with `jdbc.user`/`jdbc.password` (or `user`/`password` in the URL's query, left there) ->
    ``postgresql+psycopg2://user:password@host:port/db?q``; ``jdbc:sqlite:PATH`` (or
    ``jdbc:sqlite:file:PATH``) -> ``sqlite:///PATH``."""
    if jdbc_uri.startswith("jdbc:postgresql://"):
        rest = jdbc_uri[len("jdbc:postgresql://"):]
        user, password = properties.get("jdbc.user"), properties.get("jdbc.password")
        auth = ""
        if user:
            auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
        return f"postgresql+psycopg2://{auth}{rest}"
    if jdbc_uri.startswith("jdbc:sqlite:"):
        path = jdbc_uri[len("jdbc:sqlite:"):].removeprefix("file:").split("?", 1)[0]
        return f"sqlite:///{path}"
    raise PyIcebergReadError(f"PyIceberg reads JDBC catalogs on PostgreSQL or SQLite; "
                             f"no SQLAlchemy URL for {jdbc_uri.split('?', 1)[0]!r}")


def _hadoop_table(warehouse: str, parts: list[str], properties: Mapping[str, str]) -> Table:
    from pyiceberg.io import load_file_io
    from pyiceberg.table import StaticTable

    root = warehouse.rstrip("/")
    if "://" not in root and not root.startswith("file:"):
        root = os.path.abspath(root)
    metadata = f"{root}/{'/'.join(parts)}/metadata"
    io = load_file_io(dict(properties), metadata)
    version = _hinted_version(io, metadata)
    if version is None:
        raise NoSuchLakeTableError(f"{'.'.join(parts)} does not exist in the hadoop warehouse {warehouse} "
                                   f"(no metadata in {metadata})")
    while _metadata_file(io, metadata, version + 1):
        version += 1
    location = _metadata_file(io, metadata, version)
    if location is None:
        raise PyIcebergReadError(f"{metadata}/version-hint.text names version {version}, "
                                 "whose metadata file is gone")
    return StaticTable.from_metadata(location, dict(properties))


def _metadata_file(io, metadata: str, version: int) -> str | None:
    """The metadata file of `version`, plain or gzip-compressed, when it exists."""
    for name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json"):
        if io.new_input(f"{metadata}/{name}").exists():
            return f"{metadata}/{name}"
    return None


def _hinted_version(io, metadata: str) -> int | None:
    hint = io.new_input(f"{metadata}/version-hint.text")
    if hint.exists():
        with hint.open() as f:
            text = f.read().decode().strip()
        if text.isdigit():
            return int(text)
    local = metadata.removeprefix("file://").removeprefix("file:")
    if "://" in local or not os.path.isdir(local):
        return None
    found = [int(n[1:].split(".", 1)[0]) for n in os.listdir(local)
             if n.startswith("v") and n.endswith(".metadata.json") and n[1:].split(".", 1)[0].isdigit()]
    return max(found, default=None)


# --- reads ---------------------------------------------------------------------------------------

def delta_tags(table: Table) -> dict[int, int]:
    """{delta: snapshot id} of the table's `delta_<N>` tags (one per delta that changed it)."""
    return dict(sorted((int(n[len(TAG_PREFIX):]), ref.snapshot_id) for n, ref in table.metadata.refs.items()
                       if ref.snapshot_ref_type == "tag" and n.startswith(TAG_PREFIX)
                       and n[len(TAG_PREFIX):].isdigit()))


def folded_deltas(table: Table) -> list[tuple[int, ...]]:
    """The deltas of each folded commit (a range run's: `deltaport.deltas`, "3-5,9") among the
    table's snapshots, oldest first."""
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    return [tuple(_ranges_parse(s.summary[DELTAS_PROPERTY])) for s in snapshots
            if s.summary is not None and s.summary.get(DELTAS_PROPERTY)]


def history_from(table: Table) -> int | None:
    """The table's `deltaport.history-from`: the first delta whose closed versions its history
    holds; None when no history is kept."""
    value = table.properties.get(HISTORY_FROM_PROPERTY)
    return int(value) if value is not None and str(value).lstrip("-").isdigit() else None


def lake_mark(manifest: Table | None) -> int | None:
    """The source's landed delta as its manifest table records it (`as_of.LANDED_PROPERTY`), or
    None: no manifest, or a lake written before the mark."""
    value = None if manifest is None else manifest.properties.get(LANDED_PROPERTY)
    return int(value) if value is not None and str(value).lstrip("-").isdigit() else None


def resolve(table: Table, delta: int, *, mark: int | None, name: str | None = None) -> Resolution:
    """Which state of `table` answers "as of `delta`" (`as_of.resolve_as_of`'s rules), from its
    own metadata and `mark`, the source's lake mark (`lake_mark`; None: the table's newest
    recorded delta stands for it, as for a lake written before the mark). Raises
    `as_of.DeltaNotLandedError` for a delta above the source's landed one."""
    recorded = last_delta(table)
    return resolve_as_of(delta, landed=source_landed(mark, recorded), recorded=recorded, tags=delta_tags(table),
                         folds=folded_deltas(table), history_from=history_from(table), name=name or _name(table))


def delta_snapshot_id(table: Table, delta: int, *, mark: int | None = None) -> int | None:
    """The snapshot holding the table's rows right after `delta`: its own tag `delta_<N>`, the current
    snapshot when no delta after N changed the table, or the newest tag before N (`resolve`;
    `mark` as there). None when the table had no rows then (no commit records a delta up to N).
    `PyIcebergReadError` when no snapshot alone answers: a delta inside a range run's commit,
    or one the history answers because maintenance dropped its tag (read it with `read_history`
    or deltaport's Spark read instead); `as_of.DeltaNotLandedError` for a delta not landed."""
    found = resolve(table, delta, mark=mark)
    tags = delta_tags(table)
    if int(delta) in tags:  # landed (resolved), and its own tag names it, whoever else answers too
        return tags[int(delta)]
    if isinstance(found, FromTag):
        return found.snapshot_id
    if isinstance(found, Current):
        return table.metadata.current_snapshot_id
    if isinstance(found, Absent):
        return None
    tagged = ranges_text(sorted(tags))
    what = (f"inside the range run's commit of deltas {ranges_text(list(found.deltas))}"
            if isinstance(found, FromFold) else "answered by the table's history, without a tag of its own")
    raise PyIcebergReadError(f"{_name(table)} as of delta {int(delta)}: no snapshot alone holds it, it is {what} "
                             f"(tagged deltas: {tagged or 'none'}); read it with history or Spark")


def last_delta(table: Table) -> int | None:
    """R, the last delta recorded in the table (not the source's landed delta: a delta that left
    the table alone records nothing in it; `as_of`), as resources.spark.iceberg_reads.last_applied_deltas
    finds it: the newest of the `delta_<N>` tags and the delta in the current snapshot's commit
    summary. A delta's tag is written right after its commit and deltas apply in order, so the
    newest tag is the last delta even when maintenance committed after it and expired the
    commits between (the current snapshot's ancestors then stop at an expired parent). Only a
    table without either is walked back along the current snapshot's ancestors. None when the
    table records no delta."""
    current = table.metadata.current_snapshot_id
    if current is None:
        return None
    tagged = [int(n[len(TAG_PREFIX):]) for n, ref in table.metadata.refs.items()
              if ref.snapshot_ref_type == "tag" and n.startswith(TAG_PREFIX) and n[len(TAG_PREFIX):].isdigit()]
    snapshot = table.metadata.snapshot_by_id(current)
    recorded = snapshot.summary[DELTA_PROPERTY] if snapshot is not None and snapshot.summary is not None else None
    if tagged or recorded is not None:
        return max([*tagged, *([int(recorded)] if recorded is not None else [])])
    while snapshot is not None:
        recorded = snapshot.summary[DELTA_PROPERTY] if snapshot.summary is not None else None
        if recorded is not None:
            return int(recorded)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return None


def read_current(table: Table, row_filter: str | BooleanExpression = "true") -> pa.Table:
    """The table's current rows (that pass `row_filter`, a WHERE text or a PyIceberg expression)."""
    return table.scan(row_filter=row_filter).to_arrow()


def read_delta(table: Table, delta: int, row_filter: str | BooleanExpression = "true", *,
               mark: int | None = None) -> pa.Table:
    """The table's rows right after delta `delta` (`delta_snapshot_id`), in that snapshot's own
    schema; no rows (and no columns) when the table had none then. `mark`: the source's lake
    mark (`lake_mark` of its manifest): without it a delta above the table's own newest is
    refused as not landed, though it may be a delta that left the table alone."""
    import pyarrow as pa

    snapshot_id = delta_snapshot_id(table, delta, mark=mark)
    if snapshot_id is None:
        return pa.table({})
    return table.scan(row_filter=row_filter, snapshot_id=snapshot_id).to_arrow()


def read_history(snapshot: Table, history: Table | None, form: Form, last: int | None = None, *,
                 current_filter: str | None = None) -> pa.Table:
    """The versions a Prostore FOR SYSTEM_TIME `form` selects, from the snapshot table (current
    versions: `sys_to` null, `sys_op` 0) and the history table (closed versions), as one Arrow
    table with the history's columns (`sys_close_date` and `delta_num` null for current rows).

    Each scan gets the form's own WHERE text (`current_where` on the snapshot table, which has no
    `sys_to` and `sys_op`), so PyIceberg prunes files with the clause Spark SQL runs. `last`: the
    snapshot's last applied delta; the history is read up to it (a delta whose history is written
    and whose MERGE is not is never half-seen). `current_filter`: a clause the snapshot table's rows
    must also meet to be versions (a change stream's: `history_forms.LIVE`, not a tombstone).
    `history` None: the table has no history table yet (no version has closed)."""
    import pyarrow as pa

    bound = "" if last is None else f" AND delta_num <= {int(last)}"
    if history is None:  # no version closed yet: none to read
        closed = pa.table({name: pa.array([], kind) for name, kind in (
            ("sys_from", pa.int64()), ("sys_to", pa.int64()), ("sys_op", pa.int32()))})
    else:
        closed = history.scan(row_filter=history_where(form) + bound).to_arrow()
    if not form.needs_current():
        return closed
    where = form.current_where() if current_filter is None else f"({form.current_where()}) AND ({current_filter})"
    current = snapshot.scan(row_filter=where).to_arrow()
    kinds = {f.name: f.type for f in closed.schema}
    for name, value in (("sys_to", None), ("sys_op", 0)):
        kind = kinds.get(name, pa.int64() if name == "sys_to" else pa.int32())
        current = current.append_column(pa.field(name, kind), pa.array([value] * current.num_rows, kind))
    union = pa.concat_tables([current, closed], promote_options="permissive")
    order = [f.name for f in closed.schema] + [n for n in union.column_names if n not in kinds]
    return union.select(order)


def _name(table: Table) -> str:
    return ".".join(table.name()) if table.name() else table.metadata_location


def _ranges_parse(text: str) -> list[int]:
    """"3-5,9" -> [3, 4, 5, 9] (resources.spark.iceberg_reads._ranges_parse)."""
    out: list[int] = []
    for part in str(text).split(","):
        a, _, b = part.strip().partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def ranges_text(numbers: list[int]) -> str:
    spans, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            spans.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ", ".join(spans)

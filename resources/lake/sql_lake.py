"""What `deltaport sql` needs to know of the lake, read with PyIceberg (no JVM, no pyspark import,
no Dagster), and the Arrow scans its JVM-free engine runs on.

In: a function opening a lake table by name (``ns.table``: `platform_assets.engine.pyiceberg_tables`)
and the config's sources with their kinds. Out: the `resources.lake.prostore_sql.LakeInfo`
answers (table columns, a datamart table's DDL as of a delta from its changelog, each source's
landed delta L and each table's newest recorded delta R, history starts, close times), and `scan(Scan)`: the table's rows passing the scan's
filter, as a `pyarrow.Table`.

Both engines rewrite with this: the metadata reads are PyIceberg's whatever engine runs the
query, so the Spark and the DuckDB plan of one query are the same SQL. Every table is opened once
per `SqlLake` (one consistent metadata version per table for the whole query), and each source's
landed mark (`as_of.LANDED_PROPERTY` on its manifest) is read once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from resources.lake.as_of import Absent, FromFold, FromTag
from resources.lake.history_forms import HistoryNotKeptError
from resources.lake.prostore_sql import Scan
from resources.lake.pyiceberg_history import close_times, history_start, landed, last_applied, schema_of
from resources.lake.pyiceberg_read import NoSuchLakeTableError, PyIcebergReadError, lake_mark, ranges_text, resolve
from resources.lake.pyiceberg_rows import entity_as_of

if TYPE_CHECKING:
    import pyarrow as pa


class SqlLake:
    """`LakeInfo` on PyIceberg; `kinds`: {source: DATAMART | STREAM} from the config."""

    def __init__(self, open_table: Callable[[str], object], kinds: Mapping[str, str]):
        self._open, self.kinds = open_table, dict(kinds)
        self._tables: dict[str, object | None] = {}
        self._close: dict[str, Mapping[int, dt.datetime]] = {}
        self._entities: dict[tuple[str, str, int], object] = {}
        self._marks: dict[str, int | None] = {}

    def table(self, namespace: str, table: str):
        """The PyIceberg table, or None when the catalog has none of that name."""
        ident = f"{namespace}.{table}"
        if ident not in self._tables:
            try:
                self._tables[ident] = self._open(ident)
            except NoSuchLakeTableError:
                self._tables[ident] = None
        return self._tables[ident]

    def source_kind(self, source: str) -> str | None:
        return self.kinds.get(source)

    def table_columns(self, namespace: str, table: str) -> list[str] | None:
        found = self.table(namespace, table)
        return None if found is None else [f.name for f in found.schema().fields]

    def ddl_columns(self, datamart: str, table: str, delta: int) -> list[str]:
        return [c.name for c in self._entity(datamart, table, delta).columns]

    def ddl_times(self, datamart: str, table: str, delta: int) -> list[str]:
        return [c.name for c in self._entity(datamart, table, delta).columns if c.type == "time"]

    def _entity(self, datamart: str, table: str, delta: int):
        """The table's DDL as of `delta`, read from the changelog once per query."""
        key = (datamart, table, delta)
        if key not in self._entities:
            changelog = self.table(f"{datamart}_meta", "changelog")
            if changelog is None:
                raise PyIcebergReadError(f"datamart {datamart!r} has no changelog in the lake yet")
            self._entities[key] = entity_as_of(changelog, datamart, table, delta)
        return self._entities[key]

    def last_landed(self, namespace: str, table: str) -> int:
        """L: the source's landed delta (its manifest's mark; a lake written before it: the table's
        newest recorded delta). A mart: its last partition."""
        found = self._found(namespace, table)
        if namespace.endswith("_marts"):  # a mart records no delta in its commits: its last partition
            import pyarrow.compute as pc

            column = found.scan(selected_fields=("delta_num",)).to_arrow().column("delta_num")
            last = pc.max(column).as_py() if len(column) else None
            if last is None:
                raise PyIcebergReadError(f"no delta of {namespace}.{table} has landed yet")
            return int(last)
        return landed(found, namespace, table, self.landed_mark(namespace))

    def recorded(self, namespace: str, table: str) -> int:
        """R: the newest delta recorded in the table (its tags and commits): the history's bound."""
        return last_applied(self._found(namespace, table), namespace, table)

    def landed_mark(self, source: str) -> int | None:
        """The source's lake mark, or None (no manifest, or a lake written before the mark)."""
        if source not in self._marks:
            self._marks[source] = lake_mark(self.table(f"{source}_meta", "manifest"))
        return self._marks[source]

    def _found(self, namespace: str, table: str):
        found = self.table(namespace, table)
        if found is None:
            raise NoSuchLakeTableError(f"{namespace}.{table} is not a table of the lake")
        return found

    def snapshot_as_of(self, namespace: str, table: str, delta: int) -> tuple[int, list[str]] | None:
        """`LakeInfo.snapshot_as_of`, by `as_of.resolve_as_of` on the table's metadata."""
        found = self._found(namespace, table)
        how = resolve(found, delta, mark=self.landed_mark(namespace), name=f"{namespace}.{table}")
        if isinstance(how, Absent):
            return None
        if isinstance(how, FromFold):
            raise HistoryNotKeptError(
                f"{namespace}.{table}: delta {int(delta)} is inside the range run's commit of deltas "
                f"{ranges_text(list(how.deltas))} and the lake keeps no history answering it "
                "(`deltaport read --engine spark` rebuilds it from the increments)")
        snapshot_id = how.snapshot_id if isinstance(how, FromTag) else found.metadata.current_snapshot_id
        return snapshot_id, [f.name for f in schema_of(found, snapshot_id).fields]

    def history_start(self, source: str, table: str) -> int | None:
        found = self.table(source, table)
        return None if found is None else history_start(found)

    def close_times(self, source: str) -> Mapping[int, dt.datetime]:
        if source not in self._close:
            self._close[source] = close_times(lambda ident: self._open(ident), source)
        return self._close[source]

    def scan(self, scan: Scan) -> pa.Table:
        """The rows of `scan`'s table (of its snapshot, when it names one) passing its filter
        (PyIceberg prunes files by it)."""
        found = self.table(scan.namespace, scan.table)
        if found is None:
            raise NoSuchLakeTableError(f"{scan.namespace}.{scan.table} is not a table of the lake")
        return found.scan(row_filter=scan.row_filter, selected_fields=scan.columns or ("*",),
                          snapshot_id=scan.snapshot_id).to_arrow()


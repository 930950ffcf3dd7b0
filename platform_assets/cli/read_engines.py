"""The two engines `deltaport read` reads the lake with, behind one interface: Spark (through the
deployment's Spark Connect server) and PyIceberg (no server, no JVM, no pyspark import).

In: the config, a source and a table. Out: what `deltaport read` prints, (columns, a
`pyarrow.Table` of the canonical lake values in print order: resources/lake/arrow_order.py), for
each of Prostore's FOR SYSTEM_TIME forms:
- `close_times(source)`: each landed delta's close time (AS OF a time picks a delta from them);
- `last_landed(source, table)`: the source's landed delta L (the lake's mark; a lake written
  before it: the table's newest tag), which a read with no form reads as of;
- `state(source, table, delta)`: the table right after `delta` (AS OF DELTA_NUM);
- `versions(source, table, form)`: the versions STARTED IN / FINISHED IN select, with
  sys_from, sys_to, sys_op;
- `mart_deltas(source, asset)`, `mart(source, asset, delta)`: a user mart's landed deltas and
  one delta's rows (resources/lake/mart_read.py).
Both resolve "as of N" by the same rules (resources/lake/as_of.py: a table a delta left alone has
no tag of it): the history where it answers the form, else the newest tag at or below N; both
give the same rows in the same order (tests/support/read_engines.py runs both); only a delta
folded into a range run's commit of a table without history is the Spark engine's alone (it
rebuilds it from the increments).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from platform_assets.config import PlatformConfig
from resources.errors import DeltaportError
from resources.lake.history_forms import FinishedIn, StartedIn


@dataclass
class SparkReader:
    cfg: PlatformConfig

    def __post_init__(self):
        from platform_assets.engine import engine_for
        from resources.lake.layout import LakeLayout

        self.spark = engine_for(self.cfg).session()  # no Dagster import: a read costs the query, not the imports
        self.layout = LakeLayout(self.cfg.lake.catalog)
        self.datamarts = {d.name for d in self.cfg.datamarts}
        # What last_landed read, {(source, table): R} and {source: its lake mark}: a read after it
        # need not ask again (the mark once per source: L bounds every table's read as of a delta).
        self.recorded: dict[tuple[str, str], int] = {}
        self.marks: dict = {}

    def close_times(self, source: str) -> dict:
        """{delta: its close time, naive UTC} from the source's manifest (a change stream's delta
        time is its watermark; a delta without one is left out)."""
        import datetime as dt

        from pyspark.sql import functions as F

        from resources.spark.iceberg import table_exists

        if not table_exists(self.spark, self.layout.meta(source, "manifest")):
            return {}
        rows = (self.spark.table(self.layout.meta(source, "manifest")).groupBy("delta_num")
                .agg(F.max("delta_date_us").alias("us")).collect())
        return {r.delta_num: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=r.us)
                for r in rows if r.us is not None}

    def _mark(self, source: str):
        from resources.lake.history_read import read_mark

        if source not in self.marks:
            self.marks[source] = read_mark(self.spark, self.layout, source)
        return self.marks[source]

    def last_landed(self, source: str, table: str) -> int:
        """L: the source's landed delta (its lake mark; a lake without one: the table's newest
        recorded delta, R, which is kept for `state`)."""
        from resources.lake.read import landed_and_recorded

        landed, self.recorded[source, table] = landed_and_recorded(self.spark, self.layout, source, table,
                                                                   mark=self._mark(source))
        return landed

    def state(self, source: str, table: str, delta: int):
        from resources.lake import arrow_read

        read = arrow_read.datamart_table if source in self.datamarts else arrow_read.stream_table
        return read(self.spark, self.layout, source, table, delta, last=self.recorded.get((source, table)),
                    mark=self._mark(source))

    def versions(self, source: str, table: str, form: StartedIn | FinishedIn):
        from resources.lake import arrow_read

        if source in self.datamarts:
            return arrow_read.datamart_versions(self.spark, self.layout, source, table, form)
        landed = self.last_landed(source, table)
        if form.last > landed:
            raise DeltaportError(f"{source}.{table}: delta {form.last} has not landed (last landed: {landed})")
        return arrow_read.stream_versions(self.spark, self.layout, source, table, form,
                                          last=self.recorded[source, table])

    def mart_deltas(self, source: str, asset: str) -> list[int] | None:
        """The deltas landed in the mart `<source>_marts.<asset>` (resources/lake/mart_read.py);
        None when it has no table."""
        from resources.lake.mart_read import DELTA_COLUMN, landed_deltas, mart_ident
        from resources.spark.iceberg import DELTAS_PROPERTY, metadata_table, table_exists

        ident = f"{self.cfg.lake.catalog}.{mart_ident(source, asset)}"
        if not table_exists(self.spark, ident):
            return None
        summaries = metadata_table(self.spark, ident, "snapshots").selectExpr(f"summary['{DELTAS_PROPERTY}']")
        numbers = self.spark.table(ident).select(DELTA_COLUMN).distinct()
        return landed_deltas([r[0] for r in summaries.collect()], [r[0] for r in numbers.collect()])

    def mart(self, source: str, asset: str, delta: int):
        """(columns, Arrow rows) of the mart's delta `delta`, in print order."""
        from pyspark.sql import functions as F

        from resources.lake.mart_read import DELTA_COLUMN, mart_ident, mart_rows

        ident = f"{self.cfg.lake.catalog}.{mart_ident(source, asset)}"
        return mart_rows(self.spark.table(ident).where(F.col(DELTA_COLUMN) == F.lit(delta)).toArrow())


@contextlib.contextmanager
def _store_errors(what: str):
    """pyarrow's I/O errors (a store that does not answer, refuses, or times out) as a typed error
    naming what was read; the store's message says where (its endpoint and key), never a key's
    secret (PyIceberg's FileIO keeps it out of its messages)."""
    from resources.lake.pyiceberg_read import PyIcebergReadError

    try:
        yield
    except BrokenPipeError:  # our own stdout closed (`| head`): not the store's
        raise
    except OSError as exc:
        raise PyIcebergReadError(f"reading {what} from the lake's files failed: {exc}") from exc


@dataclass
class PyIcebergReader:
    cfg: PlatformConfig

    def __post_init__(self):
        from platform_assets.engine import pyiceberg_tables

        self.open_table = pyiceberg_tables(self.cfg)
        self.datamarts = {d.name for d in self.cfg.datamarts}
        self.marks: dict[str, int | None] = {}  # each source's lake mark (L), read once per command

    def mark(self, source: str) -> int | None:
        """The source's landed mark on its manifest (`as_of.LANDED_PROPERTY`), read once (inside
        the caller's `_store_errors`: a store that fails names the table asked for)."""
        from resources.lake.pyiceberg_history import landed_through

        if source not in self.marks:
            self.marks[source] = landed_through(self.open_table, source)
        return self.marks[source]

    def close_times(self, source: str) -> dict:
        from resources.lake.pyiceberg_history import close_times

        with _store_errors(f"{source}'s close times"):
            return close_times(self.open_table, source)

    def last_landed(self, source: str, table: str) -> int:
        from resources.lake.pyiceberg_rows import last_landed

        with _store_errors(f"{source}.{table}"):
            return last_landed(self.open_table, source, table, mark=self.mark(source))

    def state(self, source: str, table: str, delta: int):
        from resources.lake import pyiceberg_rows

        read = pyiceberg_rows.datamart_table if source in self.datamarts else pyiceberg_rows.stream_table
        with _store_errors(f"{source}.{table} as of delta {delta}"):
            return read(self.open_table, source, table, delta, mark=self.mark(source))

    def versions(self, source: str, table: str, form: StartedIn | FinishedIn):
        from resources.lake import pyiceberg_rows

        read = pyiceberg_rows.datamart_versions if source in self.datamarts else pyiceberg_rows.stream_versions
        with _store_errors(f"{source}.{table} versions"):
            return read(self.open_table, source, table, form, mark=self.mark(source))

    def mart_deltas(self, source: str, asset: str) -> list[int] | None:
        from resources.lake.mart_read import DELTA_COLUMN, landed_deltas, mart_ident
        from resources.lake.pyiceberg_read import DELTAS_PROPERTY, NoSuchLakeTableError

        try:
            mart = self.open_table(mart_ident(source, asset))
        except NoSuchLakeTableError:
            return None
        summaries = [s.summary[DELTAS_PROPERTY] if s.summary is not None else None for s in mart.metadata.snapshots]
        numbers = mart.scan(selected_fields=(DELTA_COLUMN,)).to_arrow().column(DELTA_COLUMN).unique().to_pylist()
        return landed_deltas(summaries, numbers)

    def mart(self, source: str, asset: str, delta: int):
        from pyiceberg.expressions import EqualTo

        from resources.lake.mart_read import DELTA_COLUMN, mart_ident, mart_rows

        mart = self.open_table(mart_ident(source, asset))
        return mart_rows(mart.scan(row_filter=EqualTo(DELTA_COLUMN, delta)).to_arrow())


READERS = {"spark": SparkReader, "pyiceberg": PyIcebergReader}

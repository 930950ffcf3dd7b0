"""The two engines `deltaport read` reads the lake with, behind one interface: Spark (through the
deployment's Spark Connect server) and PyIceberg (no server, no JVM, no pyspark import).

In: the config, a source and a table. Out: what `deltaport read` prints, (columns, rows of
canonical Python values), for each of Prostore's FOR SYSTEM_TIME forms:
- `close_times(source)`: each landed delta's close time (AS OF a time picks a delta from them);
- `last_landed(source, table)`: the last delta landed in the table;
- `state(source, table, delta)`: the table right after `delta` (AS OF DELTA_NUM);
- `versions(source, table, form)`: the versions STARTED IN / FINISHED IN select, with
  sys_from, sys_to, sys_op.
Both read a datamart's or a change stream's history where it answers the form (no tag needed),
tags otherwise, and give the same rows in the same order (tests/support/read_engines.py runs
both); only a delta folded into a range run's commit of a table without history is the Spark
engine's alone (it rebuilds it from the increments).
"""

from __future__ import annotations

from dataclasses import dataclass

from platform_assets.config import PlatformConfig
from resources.errors import DeltaportError
from resources.lake.history_forms import SYSTEM_COLUMNS, FinishedIn, StartedIn


@dataclass
class SparkReader:
    cfg: PlatformConfig

    def __post_init__(self):
        from platform_assets.engine import engine_for
        from resources.lake.prostore import LakeLayout

        self.spark = engine_for(self.cfg).session()  # no Dagster import: a read costs the query, not the imports
        self.layout = LakeLayout(self.cfg.lake.catalog)
        self.datamarts = {d.name for d in self.cfg.datamarts}

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

    def last_landed(self, source: str, table: str) -> int:
        from resources.lake.read import last_landed_delta

        return last_landed_delta(self.spark, self.layout, source, table)

    def state(self, source: str, table: str, delta: int) -> tuple[list[str], list[dict]]:
        from resources.lake.cdc import cdc_columns_as_of
        from resources.lake.read import entity_as_of, rows_as_of

        if source not in self.datamarts:
            return cdc_columns_as_of(self.spark, self.layout, source, table, delta)
        columns = [c.name for c in entity_as_of(self.spark, self.layout, source, table, delta).columns]
        return columns, rows_as_of(self.spark, self.layout, source, table, delta)

    def versions(self, source: str, table: str, form: StartedIn | FinishedIn) -> tuple[list[str], list[dict]]:
        from resources.lake.cdc_read import cdc_versions_in
        from resources.lake.read import entity_as_of, versions_in

        if source not in self.datamarts:
            last = self.last_landed(source, table)
            if form.last > last:
                raise DeltaportError(f"{source}.{table}: delta {form.last} has not landed (last landed: {last})")
            columns, rows = cdc_versions_in(self.spark, self.layout, source, table, form, last=last)
            return columns + list(SYSTEM_COLUMNS), rows
        entity = entity_as_of(self.spark, self.layout, source, table, form.last)
        return ([c.name for c in entity.columns] + list(SYSTEM_COLUMNS),
                versions_in(self.spark, self.layout, source, table, form))


@dataclass
class PyIcebergReader:
    cfg: PlatformConfig

    def __post_init__(self):
        from platform_assets.engine import pyiceberg_tables

        self.open_table = pyiceberg_tables(self.cfg)
        self.datamarts = {d.name for d in self.cfg.datamarts}

    def close_times(self, source: str) -> dict:
        from resources.lake.pyiceberg_history import close_times

        return close_times(self.open_table, source)

    def last_landed(self, source: str, table: str) -> int:
        from resources.lake.pyiceberg_rows import last_landed

        return last_landed(self.open_table, source, table)

    def state(self, source: str, table: str, delta: int) -> tuple[list[str], list[dict]]:
        from resources.lake import pyiceberg_rows

        read = pyiceberg_rows.datamart_rows if source in self.datamarts else pyiceberg_rows.stream_rows
        return read(self.open_table, source, table, delta)

    def versions(self, source: str, table: str, form: StartedIn | FinishedIn) -> tuple[list[str], list[dict]]:
        from resources.lake import pyiceberg_rows

        read = pyiceberg_rows.datamart_versions if source in self.datamarts else pyiceberg_rows.stream_versions
        return read(self.open_table, source, table, form)


READERS = {"spark": SparkReader, "pyiceberg": PyIcebergReader}

"""A rewritten Prostore query (`resources.lake.prostore_sql.Plan`) run on an engine; no Dagster.

- DuckDB (no JVM, no pandas): each `Scan` is read with PyIceberg into Arrow (its filter prunes
  data files; merge-on-read deletes applied as Spark applies them: tests/integration/
  test_pyiceberg_read.py), registered in an in-memory DuckDB connection under the scan's name,
  and the plan's SQL runs on them in DuckDB's dialect. Why not DuckDB's Iceberg extension
  (PyPI duckdb-ext-iceberg 1.4.4.20260205, pinned to duckdb 1.4.4, loaded from its wheel): it
  loads only with the avro extension beside it (else it tries to download it; PyPI's
  duckdb-ext-avro has it), the two binaries (80 MB) took 0.56 s to LOAD on the 2-core machine
  where PyIceberg's import takes 0.67 s, it opens Hadoop tables by metadata file and REST
  catalogs but not the JDBC catalog, and the rewrite needs PyIceberg's metadata reads anyway
  (DDL, last delta, history start). Its scans of the corpus lake's tables (merge-on-read deletes
  included) counted the rows PyIceberg counts.
- Spark: the plan's SQL in Spark's dialect, each scan the lake table `<catalog>.<ns>.<table>`
  (`VERSION AS OF <snapshot id>` for a scan of a tag's snapshot),
  run on the deployment's Spark Connect session (TIME columns need Spark 4.1's TIME type: a
  server before 4.1 refuses a query that reads one, naming MAKE_TIME).
Both return a `pyarrow.Table` of the query's columns in the query's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from resources.errors import DeltaportError
from resources.lake.prostore_sql import Plan, Scan

if TYPE_CHECKING:
    import pyarrow as pa

    from resources.lake.sql_lake import SqlLake


class QueryFailedError(DeltaportError):
    """The engine refused or failed the rewritten query (a column or function it does not know)."""


def duckdb_sql(plan: Plan, *, pretty: bool = False) -> str:
    return plan.sql("duckdb", lambda scan: exp.to_table(scan.name), pretty=pretty)


def spark_sql(plan: Plan, catalog: str, *, pretty: bool = False) -> str:
    def lake_table(scan: Scan) -> exp.Table:
        table = exp.table_(exp.to_identifier(scan.table, quoted=True), db=exp.to_identifier(scan.namespace, quoted=True),
                           catalog=exp.to_identifier(catalog, quoted=True))
        if scan.snapshot_id is not None:  # a tag's snapshot (as of a delta the history does not answer)
            table.set("version", exp.Version(this="VERSION", kind="AS OF",
                                             expression=exp.Literal.number(int(scan.snapshot_id))))
        return table

    return plan.sql("spark", lake_table, pretty=pretty)


def run_duckdb(plan: Plan, lake: SqlLake) -> pa.Table:
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for scan in plan.scans:
            con.register(scan.name, lake.scan(scan))
        try:
            return con.sql(duckdb_sql(plan)).fetch_arrow_table()
        except duckdb.Error as err:
            raise QueryFailedError(f"DuckDB: {str(err).splitlines()[0]}") from None
    finally:
        con.close()


def run_spark(plan: Plan, spark, catalog: str) -> pa.Table:
    from pyspark.errors import PySparkException

    try:
        if plan.reads_times:  # Spark 4.1's TIME (prostore_sql._time_of) is behind this session setting
            spark.conf.set("spark.sql.timeType.enabled", "true")
        return _times_in_us(spark.sql(spark_sql(plan, catalog)).toArrow())
    except PySparkException as err:
        raise QueryFailedError(f"Spark: {str(err).splitlines()[0]}") from None


def _times_in_us(table: pa.Table) -> pa.Table:
    """Spark's TIME comes as time64[ns]: as time64[us], the lake's precision and what the rows'
    text is made from (DuckDB's TIME already is)."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if pa.types.is_time(f.type) and f.type != pa.time64("us"):
            table = table.set_column(i, f.name, table.column(i).cast(pa.time64("us")))
    return table

"""A second yardstick: the plain script a user would write with Spark and Iceberg for the same
guarantees as deltaport's increment and snapshot tables. The first yardstick
(bench/plain_script.py) writes Parquet files only.

Per delta and table, in order:
- the same consumer and fastavro decoding as `user_script`;
- one `pyarrow.Table.from_pylist`, sent to the same warm Spark Connect engine;
- appended to an increment table (partitioned by delta_num);
- exact duplicates dropped (Kafka retries);
- one MERGE INTO a merge-on-read snapshot table by the primary key (sys_op 1 deletes);
- tagged `delta_<N>`, so the state as of every delta can be read.

`land_changes_table` does the same for a change stream's decoded changes, each key's last
change winning.

What it leaves out, and deltaport does: DDL from the changelog, key checks naming the delta,
idempotent re-runs (replace a delta's rows, skip applied deltas), signal events, the
manifest, partial captures and late changes, and folding a backlog into fewer commits. It does
less than deltaport, never more: its time per delta is what these tables cost on the same
engine, one delta at a time, written the simple way. (deltaport beats it where it folds a
range into one MERGE per table, or decodes a big delta on the executors.) The table
properties are a user's own choice here, not imported from deltaport.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pyarrow as pa

from bench.plain_script import table_records

NAMESPACE = "iceberg_script"
MOR = {"format-version": "2", "write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
       "write.delete.mode": "merge-on-read"}


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def land_delta_table(spark, namespace: str, table: str, delta: int, records: list[dict],
                     primary_key: Sequence[str]) -> None:
    """One Prostore delta's rows of one table (sys_op 1 deletes): append to
    `<namespace>_increment.<table>`, MERGE into `<namespace>.<table>` and tag it."""
    if records:
        _land(spark, namespace, table, delta, pa.Table.from_pylist(records), primary_key,
              op_column="sys_op", deleted="1")


def land_changes_table(spark, namespace: str, table: str, delta: int, changes: list[dict],
                       key_columns: Sequence[str]) -> None:
    """One change-stream delta's changes of one table (dicts of the values plus `_op`, "upsert"
    or "delete", and `_seq`, their order in the stream): the same, the last change per key
    winning (partial captures and late changes are not handled: the script does less)."""
    if changes:
        columns = list(dict.fromkeys(k for c in changes for k in c))  # a delete may carry its key alone
        arrow = pa.table({k: [c.get(k) for c in changes] for k in columns})
        _land(spark, namespace, table, delta, arrow, key_columns,
              op_column="_op", deleted="'delete'", order_column="_seq")


def _land(spark, namespace: str, table: str, delta: int, arrow: pa.Table, keys: Sequence[str], *,
          op_column: str, deleted: str, order_column: str | None = None) -> None:
    """Append `arrow` to the increment table, MERGE its last change per key into the snapshot
    table (`op_column` = `deleted` deletes) and tag `delta_<N>`. The tables are created from
    the first delta's columns; a column all NULL there is a string."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(arrow)
    increment, snapshot = f"{namespace}_increment.{table}", f"{namespace}.{table}"
    rows = frame.withColumn("delta_num", F.lit(delta).cast("long"))
    if not spark.catalog.tableExists(increment):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}_increment")
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        rows = rows.select(*[F.col(_q(f.name)).cast("string").alias(f.name) if f.dataType.typeName() == "void"
                             else F.col(_q(f.name)) for f in rows.schema.fields])
        rows.writeTo(increment).using("iceberg").partitionedBy(F.col("delta_num")).create()
        props = ", ".join(f"'{k}'='{v}'" for k, v in MOR.items())
        spark.sql(f"CREATE TABLE {snapshot} USING iceberg TBLPROPERTIES ({props}) AS "
                  f"SELECT * FROM {increment} WHERE false")
        dropped = [c for c in (op_column, order_column, "delta_num") if c]
        spark.sql(f"ALTER TABLE {snapshot} DROP COLUMNS ({', '.join(map(_q, dropped))})")
    else:  # a later delta may lack a column (never set): NULL
        have = set(rows.columns)
        rows = rows.select(*[(F.col(_q(f.name)) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
                             for f in spark.table(increment).schema.fields])
        rows.writeTo(increment).append()
    target = [f.name for f in spark.table(snapshot).schema.fields]
    if order_column is None:
        source = frame.dropDuplicates()
    else:
        newest = Window.partitionBy(*[F.col(_q(k)) for k in keys]).orderBy(F.col(_q(order_column)).desc())
        source = frame.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
    have = set(source.columns)
    source = source.select(*[(F.col(_q(c)) if c in have else F.lit(None)).alias(c) for c in target],
                           F.col(_q(op_column)))
    view = f"iceberg_script_{table}_{delta}"
    source.createOrReplaceTempView(view)
    on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
    op = f"s.{_q(op_column)}"
    spark.sql(f"MERGE INTO {snapshot} t USING {view} s ON {on} "
              f"WHEN MATCHED AND {op} = {deleted} THEN DELETE "
              f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{_q(c)} = s.{_q(c)}' for c in target)} "
              f"WHEN NOT MATCHED AND {op} <> {deleted} THEN INSERT ({', '.join(map(_q, target))}) "
              f"VALUES ({', '.join(f's.{_q(c)}' for c in target)})")
    spark.catalog.dropTempView(view)
    spark.sql(f"ALTER TABLE {snapshot} CREATE OR REPLACE TAG `delta_{delta}`")


def iceberg_script(spark, bootstrap: str, topic: str, datamart: str,
                   deltas: Sequence[tuple[int, Mapping[str, Mapping[int, tuple[int, int]]]]],
                   primary_keys: Mapping[str, Sequence[str]], *,
                   namespace: str = f"lake.{NAMESPACE}") -> tuple[int, float]:
    """(rows, seconds) of landing `deltas` [(delta, {table: {partition: (start, end)}})] in
    order, each delta's tables one after the other, as a simple script would."""
    rows, t0 = 0, time.perf_counter()
    for delta, tables in deltas:
        for table, ranges in sorted(tables.items()):
            records = table_records(bootstrap, topic, ranges, datamart=datamart, delta=delta, table=table,
                                    group="bench-iceberg-script")
            land_delta_table(spark, namespace, table, delta, records, primary_keys[table])
            rows += len(records)
    return rows, time.perf_counter() - t0

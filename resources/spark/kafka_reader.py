"""One table's messages of a delta, fetched from Kafka and decoded into a Spark DataFrame.

What flows through: the `MessageRef`s of one table in one delta (from the delta index: exact
partition and offset of every chunk), the table's DDL columns, and a Kafka topic go in; a
DataFrame comes out with the table's rows: the DDL columns in DDL order (Spark types from
`types.spark_type`, TIME as µs since midnight in a long), `sys_op` (int), and the provenance
columns `_kafka_partition` (int) and `_kafka_offset` (long) of the message each row came from. Per Kafka
partition, offset order is production order, so (`_kafka_partition`, `_kafka_offset`) order the changes of a
stream; Prostore changes a key at most once per increment, but the increment keeps the order.

Two paths, one answer (the test checks they agree row for row with fastavro's `iter_rows`):

- Driver (`fetch_table_arrow`, then `spark.createDataFrame(arrow_table, schema)`): the driver
  reads the offsets with `scan`, decodes each value with `rows_to_arrow` and hands one Arrow
  table to Spark. For a small delta (the usual case: a few MiB) this costs one consumer and no
  Spark job: no task scheduling, no Python worker, no planning round trip. Rows are in
  (stream_number, chunk_number) order. Its memory is the decoded delta, hence the size bound.
- Executor (`spark_table_changes`): the offsets are cut into tasks (one Kafka partition each, at
  most `max_task_messages` wanted messages, small gaps read through and skipped), and a Spark
  *Python Data Source* reads them: each task opens its own consumer on its executor, reads its
  offset range, decodes the wanted values and yields Arrow record batches. The driver never
  holds a row and never opens a consumer, so a big delta's read scales with executors and the
  driver's memory does not grow with it.
  `table_changes` picks the driver path when the delta's value bytes are at most
  `driver_max_bytes` (8 MiB by default), the executor path otherwise.

Why a Python Data Source and not `DataFrame.mapInArrow` over a DataFrame of tasks: in pyspark
4.1, `mapInArrow` is built on `pandas_udf` and refuses to run without pandas on the driver
(PySparkImportError PACKAGE_NOT_INSTALLED), which deltaport does not depend on. The data source
API (pyspark >= 4.0) is the public API for exactly this (Python code reading an external system
in tasks and yielding Arrow batches), needs no pandas, and gives one task per `InputPartition`
without the shuffle a `repartition(n)` of a task DataFrame would add. Its options are strings,
so the plan (tasks, columns, consumer config) travels as JSON options; Spark does not print
options in `explain()`, but the consumer config (which may hold SASL credentials) does reach
every task, as it must for the executors to connect.

Guarantees and limits:
- Exactly the referenced offsets are decoded; a referenced offset the topic no longer holds
  (retention) raises `MissingMessagesError` naming topic, partition and offsets.
- A value that does not decode raises the codec's `DecodeError` located at topic, partition and
  offset (part "value"). On the executor path it is raised inside a task; Spark surfaces it on
  the driver as a `PythonException` when an action runs, so run the action under
  `task_errors()`, which turns it back into the same `DecodeError` subclass with its location
  (or a `KafkaReadError` for other task failures such as an unreachable broker).
- The executor-path DataFrame is lazy and not cached: every action reads Kafka again. Write it
  once (or `persist()` it).
- Executors need deltaport installed and a Python with its dependencies: Spark starts workers
  with `PYSPARK_PYTHON` (default `python3` on the PATH).
No Dagster here; importing this module starts no JVM.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from resources.codecs.arrow_rows import SYS_OP, arrow_schema, rows_to_arrow
from resources.codecs.backup import MESSAGE_TYPE_DATA
from resources.codecs.types import Column, spark_type
from resources.prostore.delta_index import MessageRef
from resources.errors import DecodeError, DeltaportError, Location
from resources.kafka.scan import scan

# The data source base classes (pure Python: importing them starts no JVM).
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DRIVER_MAX_BYTES",
    "SOURCE_NAME",
    "KafkaReadError",
    "MissingMessagesError",
    "fetch_table_arrow",
    "local_frame",
    "output_arrow_schema",
    "output_spark_schema",
    "plan_tasks",
    "spark_table_changes",
    "table_changes",
    "task_errors",
    "translate_task_error",
]

PARTITION_COL, OFFSET_COL = "_kafka_partition", "_kafka_offset"  # Iceberg reserves _partition
DRIVER_MAX_BYTES = 8 * 1024 * 1024
SOURCE_NAME = "deltaport_kafka_table"
# Up to this many unwanted messages between two wanted ones are read through and skipped rather
# than starting another consumer (driver) or task (executor): a backup partition interleaves
# the tables and streams of a delta, and a new fetch costs more than a few skipped chunks.
MAX_SKIPPED = 64


class KafkaReadError(DeltaportError):
    """The referenced messages could not be read (broker, topic, or a failed Spark task)."""


class MissingMessagesError(KafkaReadError):
    """Referenced offsets are no longer in the topic (retention or compaction removed them)."""


# ---------------------------------------------------------------- schemas


def output_arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    """The Arrow schema both paths produce: `arrow_schema(columns)` with TIME as int64 µs,
    then `_kafka_partition` (int32) and `_kafka_offset` (int64)."""
    _check_names(columns)
    fields = [pa.field(f.name, pa.int64()) if pa.types.is_time(f.type) else f
              for f in arrow_schema(columns)]
    return pa.schema(fields + [pa.field(PARTITION_COL, pa.int32()), pa.field(OFFSET_COL, pa.int64())])


def output_spark_schema(columns: Sequence[Column]) -> Any:
    """The Spark `StructType` of the DataFrame: DDL columns (`spark_type`), sys_op, provenance.
    Every field is nullable: the DDL's NOT NULL is the lake table's business, not the reader's."""
    from pyspark.sql import types as T

    _check_names(columns)
    fields = [T.StructField(c.name, spark_type(c), True) for c in columns]
    fields += [T.StructField(SYS_OP, T.IntegerType(), True),
               T.StructField(PARTITION_COL, T.IntegerType(), True),
               T.StructField(OFFSET_COL, T.LongType(), True)]
    return T.StructType(fields)


def _check_names(columns: Sequence[Column]) -> None:
    taken = {c.name for c in columns} & {SYS_OP, PARTITION_COL, OFFSET_COL}
    if taken:
        raise DeltaportError(f"DDL column names {sorted(taken)} clash with the reader's own columns")


def _decode(topic: str, partition: int, offset: int, value: bytes | None,
            columns: Sequence[Column], schema: pa.Schema) -> pa.Table:
    """One message's value -> a table of `schema` (time as µs, provenance added)."""
    try:
        table = rows_to_arrow(value, columns)
    except DecodeError as exc:
        exc.located(Location(topic, partition, offset), "value")
        raise  # the same error, its cause (fastavro's, polars') kept
    arrays = [col.cast(pa.int64()) if pa.types.is_time(col.type) else col for col in table.columns]
    n = table.num_rows
    arrays += [pa.array([partition] * n, pa.int32()), pa.array([offset] * n, pa.int64())]
    return pa.Table.from_arrays(arrays, schema=schema)


# ---------------------------------------------------------------- planning


def _check_refs(refs: Sequence[MessageRef]) -> None:
    tables = {r.table_name for r in refs}
    if len(tables) > 1 or any(r.message_type != MESSAGE_TYPE_DATA for r in refs):
        raise ValueError(f"refs must be the data messages of one table, got tables {sorted(map(str, tables))} "
                         f"and message types {sorted({r.message_type for r in refs})}")
    seen: set[tuple[int, int]] = set()
    for r in refs:
        if (r.partition, r.offset) in seen:
            raise ValueError(f"refs name partition {r.partition} offset {r.offset} twice")
        seen.add((r.partition, r.offset))


def _runs(offsets: Sequence[int], max_messages: int | None) -> list[list[int]]:
    """Sorted offsets cut where more than MAX_SKIPPED unwanted messages lie between two wanted
    ones, or where a run already has `max_messages` offsets."""
    runs: list[list[int]] = []
    for off in sorted(offsets):
        if runs and off - runs[-1][-1] - 1 <= MAX_SKIPPED and (
                max_messages is None or len(runs[-1]) < max_messages):
            runs[-1].append(off)
        else:
            runs.append([off])
    return runs


def _by_partition(refs: Sequence[MessageRef]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for r in refs:
        out[r.partition].append(r.offset)
    return dict(out)


def _spans(offsets: Sequence[int]) -> list[list[int]]:
    """Sorted offsets as [start, end) spans of consecutive offsets (compact in the plan)."""
    spans: list[list[int]] = []
    for off in offsets:
        if spans and spans[-1][1] == off:
            spans[-1][1] = off + 1
        else:
            spans.append([off, off + 1])
    return spans


def _missing(topic: str, partition: int, wanted: set[int]) -> MissingMessagesError:
    shown = sorted(wanted)
    more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
    return MissingMessagesError(
        f"topic {topic!r} partition {partition}: referenced offsets {shown[:10]}{more} are no longer "
        "in the topic (deleted by retention or compaction?)")


# ---------------------------------------------------------------- driver path


def fetch_table_arrow(bootstrap: str, topic: str, refs: Sequence[MessageRef], columns: Sequence[Column], *,
                      consumer_config: Mapping[str, object] | None = None, timeout: float = 30) -> pa.Table:
    """Read and decode the referenced messages on this process: one Arrow table of
    `output_arrow_schema(columns)`, chunks in (stream_number, chunk_number) order.

    Raises the codec's `DecodeError` located at the bad message, `MissingMessagesError` for
    offsets the topic no longer holds, `ScanError` when the topic cannot be read."""
    _check_refs(refs)
    schema = output_arrow_schema(columns)
    runs = {p: _runs(offs, None) for p, offs in _by_partition(refs).items()}
    decoded: dict[tuple[int, int], pa.Table] = {}
    # scan() takes one range per partition: round i reads the i-th run of every partition.
    for i in range(max((len(r) for r in runs.values()), default=0)):
        ranges = {p: (r[i][0], r[i][-1] + 1) for p, r in runs.items() if i < len(r)}
        wanted = {p: set(runs[p][i]) for p in ranges}
        for msg in scan(bootstrap, topic, ranges, config=consumer_config, timeout=timeout):
            if msg.offset in wanted[msg.partition]:
                wanted[msg.partition].discard(msg.offset)
                decoded[(msg.partition, msg.offset)] = _decode(
                    topic, msg.partition, msg.offset, msg.value, columns, schema)
        for p, left in wanted.items():
            if left:
                raise _missing(topic, p, left)
    ordered = sorted(refs, key=lambda r: (r.stream_number, r.chunk_number, r.partition, r.offset))
    tables = [decoded[(r.partition, r.offset)] for r in ordered]
    return pa.concat_tables(tables) if tables else schema.empty_table()


# ---------------------------------------------------------------- executor path


class _Task(InputPartition):
    """One Spark task: a Kafka partition's offset range and the wanted offsets in it."""

    def __init__(self, partition: int, spans: list[list[int]]):
        self.partition = partition
        self.spans = spans  # [start, end) of wanted offsets, sorted


def _read_task(bootstrap: str, topic: str, task: _Task, columns: Sequence[Column],
               config: Mapping[str, object], timeout: float) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: read the task's range with its own consumer (scan: assigned by
    hand, every msg.error() checked, closed in finally), yield the wanted values decoded."""
    schema = output_arrow_schema(columns)
    wanted = {off for start, end in task.spans for off in range(start, end)}
    rng = {task.partition: (task.spans[0][0], task.spans[-1][1])}
    for msg in scan(bootstrap, topic, rng, config=config, timeout=timeout):
        if msg.offset in wanted:
            wanted.discard(msg.offset)
            yield from _decode(topic, msg.partition, msg.offset, msg.value, columns, schema).to_batches()
    if wanted:
        raise _missing(topic, task.partition, wanted)


class KafkaTableSource(DataSource):
    """Spark Python Data Source reading one table's messages of a delta, one task per
    `_Task`. Options (all JSON strings but `bootstrap` and `topic`): `columns`, `tasks`,
    `consumer_config`, `timeout`. Built by `spark_table_changes`; not meant to be used by hand."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> Any:
        return output_spark_schema(_columns(self.options["columns"]))

    def reader(self, schema: Any) -> "_KafkaTableReader":
        return _KafkaTableReader(self.options)


class _KafkaTableReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]):
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        self.columns = _columns(options["columns"])
        self.config = json.loads(options.get("consumer_config") or "{}")
        self.timeout = float(options.get("timeout") or 30)
        self.tasks = json.loads(options["tasks"])

    def partitions(self) -> list[_Task]:
        return [_Task(t["partition"], t["spans"]) for t in self.tasks]

    def read(self, partition: _Task) -> Iterator[pa.RecordBatch]:
        return _read_task(self.bootstrap, self.topic, partition, self.columns, self.config, self.timeout)


def _columns(text: str) -> list[Column]:
    return [Column(**c) for c in json.loads(text)]


def plan_tasks(refs: Sequence[MessageRef], max_task_messages: int) -> list[dict]:
    """The tasks of the executor path: per Kafka partition, runs of at most `max_task_messages`
    wanted offsets; in the order of the refs' first (stream_number, chunk_number)."""
    if max_task_messages < 1:
        raise ValueError(f"max_task_messages must be at least 1, got {max_task_messages}")
    rank = {(r.partition, r.offset): (r.stream_number, r.chunk_number)
            for r in refs}
    tasks = [{"partition": p, "spans": _spans(run)}
             for p, offs in _by_partition(refs).items() for run in _runs(offs, max_task_messages)]
    tasks.sort(key=lambda t: min(rank[(t["partition"], o)] for s, e in t["spans"] for o in range(s, e)))
    return tasks


def spark_table_changes(spark: SparkSession, bootstrap: str, topic: str, refs: Sequence[MessageRef],
                        columns: Sequence[Column], *, consumer_config: Mapping[str, object] | None = None,
                        timeout: float = 30, max_task_messages: int = 200) -> DataFrame:
    """A lazy DataFrame (`output_spark_schema(columns)`) whose tasks fetch and decode the
    referenced messages on the executors; the driver only plans. Run its action under
    `task_errors()` to get a located `DecodeError` rather than Spark's `PythonException`."""
    _check_refs(refs)
    schema = output_spark_schema(columns)
    tasks = plan_tasks(refs, max_task_messages)
    if not tasks:
        return spark.createDataFrame([], schema)
    spark.dataSource.register(KafkaTableSource)  # idempotent; registers for this session
    cols = [{"name": c.name, "type": c.type, "length": c.length, "nullable": c.nullable} for c in columns]
    try:
        config = json.dumps(dict(consumer_config or {}))
    except TypeError as exc:  # callbacks (error_cb, oauth_cb, ...) cannot travel to executors
        raise DeltaportError(f"the executor path needs a consumer config of plain values: {exc}") from exc
    return (spark.read.format(SOURCE_NAME).schema(schema)
            .option("bootstrap", bootstrap).option("topic", topic)
            .option("columns", json.dumps(cols)).option("tasks", json.dumps(tasks, separators=(",", ":")))
            .option("consumer_config", config)
            .option("timeout", str(timeout))
            .load())


# ---------------------------------------------------------------- choice and errors


def table_changes(spark: SparkSession, bootstrap: str, topic: str, refs: Sequence[MessageRef],
                  columns: Sequence[Column], *, value_bytes: int, driver_max_bytes: int = DRIVER_MAX_BYTES,
                  consumer_config: Mapping[str, object] | None = None, timeout: float = 30,
                  max_task_messages: int = 200, local_as_arrow: bool = False) -> DataFrame | pa.Table:
    """One table's changes in a delta as a DataFrame (`output_spark_schema(columns)`).

    `value_bytes` (the refs' total value size, from the delta index) picks the path: at most
    `driver_max_bytes`, the driver fetches and decodes now (errors raise here) and the
    DataFrame holds the rows; above it, executors fetch when an action runs (errors raise there:
    use `task_errors()`). See the module docstring for why both.
    `local_as_arrow`: the driver path returns its Arrow table (`output_arrow_schema(columns)`)
    instead, for a caller that sends several deltas' rows to Spark as one relation
    (`local_frame`): each local relation of a union costs Spark its own scan and tasks."""
    if value_bytes <= driver_max_bytes:
        table = fetch_table_arrow(bootstrap, topic, refs, columns,
                                  consumer_config=consumer_config, timeout=timeout)
        return table if local_as_arrow else local_frame(spark, table, output_spark_schema(columns))
    return spark_table_changes(spark, bootstrap, topic, refs, columns, consumer_config=consumer_config,
                               timeout=timeout, max_task_messages=max_task_messages)


def local_frame(spark: SparkSession, table: pa.Table, schema: Any) -> DataFrame:
    """A DataFrame of rows held by the driver. pyspark 4.x takes a pyarrow Table directly (no
    pandas); the Spark schema is given because inference would map Arrow's naive timestamp to
    TimestampType, not TimestampNTZType."""
    return spark.createDataFrame(table, schema=schema)


# A located DecodeError as the worker's traceback prints it (last line wins: chained tracebacks).
_LOCATED = re.compile(
    r"^[\w.]*?(?P<cls>\w+): (?P<kind>\w+)(?: \((?P<part>\w+)\))? at topic '(?P<topic>[^']*)' "
    r"partition (?P<partition>-?\d+) offset (?P<offset>-?\d+): (?P<reason>.*)$", re.M)
_LAST_ERROR = re.compile(r"^[\w.]*(?:Error|Exception): .*$", re.M)


def _decode_error_classes() -> dict[str, type[DecodeError]]:
    out: dict[str, type[DecodeError]] = {}
    todo: list[type[DecodeError]] = [DecodeError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return out


def translate_task_error(exc: BaseException) -> BaseException:
    """A Spark error from a read task, as deltaport's own error: the located `DecodeError`
    subclass the task raised, else a `KafkaReadError` with the task's last error line.
    Anything else (not a Python worker error, or another UDF's) is returned as it is."""
    from pyspark.errors import PythonException

    text = str(exc)
    if not isinstance(exc, PythonException) or "_read_task" not in text:
        return exc  # not a failure of this module's read tasks (another UDF's, the JVM's)
    located = list(_LOCATED.finditer(text))
    if located:
        m = located[-1]
        cls = _decode_error_classes().get(m["cls"], DecodeError)
        error = cls(m["reason"], location=Location(m["topic"], int(m["partition"]), int(m["offset"])),
                    part=m["part"])
        if error.kind != m["kind"]:  # an unknown subclass: keep the kind it printed
            error = DecodeError(m["reason"], location=error.location, part=m["part"])
            error.kind = m["kind"]
            error.args = (error._render(),)
        return error
    lines = _LAST_ERROR.findall(text)
    return KafkaReadError(f"a Kafka read task failed: {lines[-1] if lines else text[-500:]}")


@contextmanager
def task_errors() -> Iterator[None]:
    """Run a Spark action on an executor-path DataFrame inside this: a failed read task raises
    deltaport's error (see `translate_task_error`) instead of Spark's `PythonException`."""
    try:
        yield
    except Exception as exc:
        translated = translate_task_error(exc)
        if translated is exc:
            raise
        raise translated from exc

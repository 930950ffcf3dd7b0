"""The two yardsticks of the platform benchmark; neither uses Spark, Dagster or the lake.

- `user_script`: what a user would write instead of the platform: a confluent-kafka consumer
  over the delta's offset ranges (given to it, as a committed-offset consumer would resume
  from them), each key read with fastavro to keep the delta's table-data messages, each value
  read with fastavro record by record into Python dicts, one `pyarrow.Table.from_pylist`, and
  one Parquet file per delta. Types are left as fastavro gives them (TIMESTAMP stays a long):
  the script does less than the platform, never more.
- `floor`: the least any reader must do: the same consumer over the same ranges, and
  `rows_to_arrow` (the platform's native decoder) on each wanted value, writing nothing.

Both follow confluent-kafka's consumer example: `msg.error()` always checked, `close()` in
`finally`, and a timeout on every wait. Partitions are assigned by hand (no group rebalance).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaException, TopicPartition

from resources.codecs.arrow_rows import rows_to_arrow
from resources.codecs.types import Column

TIMEOUT = 30.0


def _messages(bootstrap: str, topic: str, ranges: Mapping[int, tuple[int, int]], group: str) -> Iterator:
    """Every message in `ranges` ({partition: (start, end)}, end exclusive), then stop."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "socket.timeout.ms": 10_000,
    })
    open_ = {p: end for p, (start, end) in ranges.items() if end > start}
    try:
        consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in open_])
        deadline = time.monotonic() + TIMEOUT
        while open_:
            # consume() returns when it has num_messages or after timeout: a short timeout, so
            # the last (partial) batch of a range is not held back; TIMEOUT bounds a silence.
            batch = consumer.consume(num_messages=500, timeout=0.1)
            if not batch:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no message from {topic!r} within {TIMEOUT} s; still open: {open_}")
                continue
            deadline = time.monotonic() + TIMEOUT
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
                p, off = msg.partition(), msg.offset()
                if p not in open_ or off >= open_[p]:
                    continue
                yield msg
                if off + 1 >= open_[p]:
                    del open_[p]
    finally:
        consumer.close()


def table_records(bootstrap: str, topic: str, ranges: Mapping[int, tuple[int, int]], *, datamart: str,
                  delta: int, table: str, group: str = "bench-user-script") -> list[dict]:
    """One delta's rows of `table` as fastavro reads them (dicts, sys_op included)."""
    records: list[dict] = []
    for msg in _messages(bootstrap, topic, ranges, group):
        key = next(fastavro.reader(io.BytesIO(msg.key())))
        if (key["datamart"], key["deltaNum"], key["messageType"], key["tableName"]) != (datamart, delta, 0, table):
            continue
        for record in fastavro.reader(io.BytesIO(msg.value())):
            records.append(record)
    return records


def user_script(bootstrap: str, topic: str, ranges: Mapping[int, tuple[int, int]], *, datamart: str,
                delta: int, table: str, out: Path) -> int:
    """Land one delta's rows of `table` as a Parquet file the plain way; returns the rows."""
    records = table_records(bootstrap, topic, ranges, datamart=datamart, delta=delta, table=table)
    pq.write_table(pa.Table.from_pylist(records), out)
    return len(records)


def floor(bootstrap: str, topic: str, wanted: Mapping[int, Sequence[int]], columns: Sequence[Column]) -> int:
    """Consume the wanted offsets ({partition: offsets}) and decode each value to Arrow
    natively; nothing is written. Returns the rows decoded."""
    sets = {p: set(offs) for p, offs in wanted.items()}
    ranges = {p: (min(offs), max(offs) + 1) for p, offs in sets.items() if offs}
    tables = [rows_to_arrow(msg.value(), columns)
              for msg in _messages(bootstrap, topic, ranges, "bench-floor") if msg.offset() in sets[msg.partition()]]
    return sum(t.num_rows for t in tables)

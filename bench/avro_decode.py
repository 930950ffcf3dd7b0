"""Benchmark: table-data values decoded to Arrow natively (polars) vs record by record (fastavro).

Not a test. Builds N container files of `chunk` rows of the seed's `marketing.sales` table, in
the seed's own `row` schema (TIMESTAMP as a plain long, every field `["null", T]` with a doc),
as Prostore sends them (one message value per chunk), then times, on one core of this machine:

- `pl.read_avro` alone, per value: the floor (no header checks, no conversion to DDL types);
- `rows_to_arrow_many(values, columns)`: the native path (resources/codecs/arrow_rows.py);
- `iter_rows(value, columns)` for every value: fastavro, canonical Python values per row;
- the same rows put into Arrow (`pa.Table.from_pylist`), the fair end-to-end comparison.

Usage:  .venv/bin/python bench/avro_decode.py [--chunks 200] [--chunk-rows 1000]
                                              [--codec null|deflate|snappy|all] [--repeat 3]
Prints one small table per codec: rows/s of each path and its time relative to the native path
(fastavro's "10x" = ten times as slow). The native and fastavro tables are asserted equal.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

# One core, like one Spark task decoding its offset range; set before polars is imported.
os.environ.setdefault("POLARS_MAX_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402

from resources.codecs.arrow_rows import arrow_schema, rows_to_arrow_many  # noqa: E402
from resources.codecs.backup import iter_rows  # noqa: E402
from tests.support.seed_vectors import SALES_COLUMNS as SALES  # noqa: E402
from tests.support.seed_vectors import SEED_ROW_SCHEMA  # noqa: E402

DESCRIPTIONS = ("Покупка по акции 1+1", "Покупка без акций", None)


def make_values(chunks: int, chunk_rows: int, codec: str) -> list[bytes]:
    schema = fastavro.parse_schema(SEED_ROW_SCHEMA)
    values = []
    for c in range(chunks):
        records = []
        for r in range(chunk_rows):
            i = c * chunk_rows + r
            records.append({
                "id": 1_000_111 + i,
                "transaction_date": 1_614_269_474_000_000 + i * 1_000_003,
                "product_code": f"ABC{102_101 + i % 5000}",
                "product_units": 1 + i % 7,
                "store_id": 1_000_000_000 + i % 12_345,
                "description": DESCRIPTIONS[i % 3],
                "sys_op": i % 2,
            })
        buf = io.BytesIO()
        # 64 KiB blocks, Java Avro's DataFileWriter default (Prostore is a Java application).
        fastavro.writer(buf, schema, records, codec=codec, sync_interval=64_000)
        values.append(buf.getvalue())
    return values


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench(codec: str, chunks: int, chunk_rows: int, repeat: int) -> None:
    values = make_values(chunks, chunk_rows, codec)
    total = chunks * chunk_rows
    names = [c.name for c in SALES] + ["sys_op"]

    def fastavro_rows() -> int:
        return sum(1 for v in values for _ in iter_rows(v, SALES))

    def fastavro_arrow() -> pa.Table:
        rows = [r for v in values for r in iter_rows(v, SALES)]
        return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows],
                                    schema=arrow_schema(SALES))

    t_polars, _ = best_of(repeat, lambda: [pl.read_avro(io.BytesIO(v)) for v in values])
    t_native, table = best_of(repeat, lambda: rows_to_arrow_many(values, SALES))
    t_rows, count = best_of(repeat, fastavro_rows)
    t_arrow, reference = best_of(repeat, fastavro_arrow)
    assert table.num_rows == count == total
    assert table.equals(reference), "native and fastavro decodes differ"

    size = sum(len(v) for v in values)
    print(f"\ncodec={codec}  {chunks} chunks x {chunk_rows} rows = {total:,} rows, "
          f"{size / 1e6:.1f} MB of values (best of {repeat})")
    print(f"{'path':<38}{'seconds':>9}{'rows/s':>14}{'time / native':>15}")
    for name, seconds in (
        ("pl.read_avro alone (no checks)", t_polars),
        ("rows_to_arrow_many (native)", t_native),
        ("iter_rows (fastavro, Python values)", t_rows),
        ("iter_rows + Table.from_pylist", t_arrow),
    ):
        print(f"{name:<38}{seconds:>9.3f}{total / seconds:>14,.0f}"
              f"{seconds / t_native:>14.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--chunk-rows", type=int, default=1000)
    parser.add_argument("--codec", default="null", choices=["null", "deflate", "snappy", "all"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    codecs = ["null", "deflate", "snappy"] if args.codec == "all" else [args.codec]
    for codec in codecs:
        bench(codec, args.chunks, args.chunk_rows, args.repeat)


if __name__ == "__main__":
    main()

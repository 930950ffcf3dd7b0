"""`deltaport read SOURCE.TABLE [--as-of-delta N]`: a table's state as of delta N, from the lake
(Iceberg time travel by the tag delta_<N>); without --as-of-delta, as of the last delta landed in
it, named on stderr in a comment line (`# ... as of delta 7 ...`). One row per line, data columns
only; dates, times and timestamps in ISO 8601 with microseconds (timestamps in UTC, marked Z);
numbers as numbers, decimals with their exact digits (12.50); binary as lower-case hex; null as
null (an empty field in CSV). The encodings: platform_assets/cli/read_format.py.
`--engine pyiceberg` reads the same rows without Spark (no server, no JVM): PyIceberg on the
lake's catalog, for a delta with its own tag (resources/lake/pyiceberg_rows.py)."""

from __future__ import annotations

import csv
import sys

from platform_assets.cli.common import add_config_option
from platform_assets.cli.read_format import csv_value, jsonl_line
from platform_assets.config import load_config
from platform_assets.engine import engine_for, pyiceberg_tables
from resources.errors import DeltaportError
from resources.lake.prostore import LakeLayout
from resources.lake.cdc import cdc_columns_as_of
from resources.lake.read import entity_as_of, last_landed_delta, rows_as_of


def register(sub) -> None:
    p = sub.add_parser("read", help="print a table as of a delta", description=__doc__)
    p.add_argument("table", help="SOURCE.TABLE (a datamart's table, or a change stream's <namespace>_<table>)")
    p.add_argument("--as-of-delta", type=int, default=None, metavar="N",
                   help="the delta to read the table as of (default: the last delta landed in it)")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    p.add_argument("--engine", choices=["spark", "pyiceberg"], default="spark",
                   help="spark (default: any delta) or pyiceberg (no JVM: a delta with its own tag)")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    if "." not in args.table:
        raise DeltaportError(f"table must be SOURCE.TABLE, got {args.table!r}")
    source, table = args.table.split(".", 1)
    cfg = load_config(args.config)
    if source not in cfg.source_names:
        raise DeltaportError(f"source {source!r} is not in {cfg.source_file} (sources: {', '.join(cfg.source_names)})")
    read = _pyiceberg_read if args.engine == "pyiceberg" else _spark_read
    delta, columns, rows = read(cfg, source, table, args.as_of_delta)
    if args.as_of_delta is None:
        print(f"# {source}.{table} as of delta {delta}, the last delta landed in it "
              "(--as-of-delta N reads an earlier one)", file=sys.stderr, flush=True)
    if args.format == "jsonl":
        for row in rows:
            sys.stdout.write(jsonl_line(columns, row))
    else:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_value(c, row[c]) for c in columns])
    return 0


def _spark_read(cfg, source: str, table: str, delta: int | None):
    spark = engine_for(cfg).session()  # no Dagster import: a read costs the query, not the imports
    layout = LakeLayout(cfg.lake.catalog)
    if delta is None:
        delta = last_landed_delta(spark, layout, source, table)
    if source in {d.name for d in cfg.datamarts}:
        columns = [c.name for c in entity_as_of(spark, layout, source, table, delta).columns]
        return delta, columns, rows_as_of(spark, layout, source, table, delta)
    return delta, *cdc_columns_as_of(spark, layout, source, table, delta)


def _pyiceberg_read(cfg, source: str, table: str, delta: int | None):
    from resources.lake import pyiceberg_rows

    open_table = pyiceberg_tables(cfg)
    if delta is None:
        delta = pyiceberg_rows.last_landed(open_table, source, table)
    read = pyiceberg_rows.datamart_rows if source in {d.name for d in cfg.datamarts} else pyiceberg_rows.stream_rows
    return delta, *read(open_table, source, table, delta)

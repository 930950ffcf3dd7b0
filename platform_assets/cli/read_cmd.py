"""`deltaport read SOURCE.TABLE [--as-of-delta N | --as-of TIME | --started-in A,B | --finished-in A,B]`:
a table as Prostore's FOR SYSTEM_TIME forms ask for it, from the lake. --as-of-delta N: its state
right after delta N (AS OF DELTA_NUM); --as-of 'YYYY-MM-DD HH:MM:SS' (UTC): as of the last delta
closed at or before that time; --started-in A,B: the row versions written in deltas A..B
(STARTED IN); --finished-in A,B: the versions deleted in deltas A..B, with their last values
(FINISHED IN); these two add sys_from, sys_to and sys_op. Both a datamart's and a change
stream's forms read its history table (resources/lake/history_read.py) where it is kept, tags
otherwise (as-of forms only). With no form, the
state as of the last delta landed in the table, named on stderr in a comment line
(`# ... as of delta 7 ...`). One row per line, data columns (and the system columns above); dates, times and timestamps in ISO 8601 with microseconds (timestamps in UTC, marked Z);
numbers as numbers, decimals with their exact digits (12.50); binary as lower-case hex; null as
null (an empty field in CSV). The encodings: platform_assets/cli/read_format.py.
`--engine pyiceberg` reads a state (as of a delta with its own tag, or the last) without Spark (no
server, no JVM): PyIceberg on the lake's catalog (resources/lake/pyiceberg_rows.py)."""

from __future__ import annotations

import csv
import sys

import datetime as dt

from platform_assets.cli.common import add_config_option
from platform_assets.cli.read_format import csv_value, jsonl_line
from platform_assets.config import load_config
from platform_assets.engine import engine_for, pyiceberg_tables
from resources.errors import DeltaportError
from resources.lake.prostore import LakeLayout
from resources.lake.cdc import cdc_columns_as_of
from resources.lake.cdc_read import cdc_versions_in
from resources.lake.history_forms import SYSTEM_COLUMNS, FinishedIn, StartedIn, delta_at, parse_range
from resources.spark.iceberg import table_exists
from resources.lake.read import entity_as_of, last_landed_delta, rows_as_of, versions_in


def register(sub) -> None:
    p = sub.add_parser("read", help="print a table as of a delta", description=__doc__)
    p.add_argument("table", help="SOURCE.TABLE (a datamart's table, or a change stream's <namespace>_<table>)")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--as-of-delta", type=int, default=None, metavar="N",
                      help="the delta to read the table as of (default: the last delta landed in it)")
    form.add_argument("--as-of", default=None, metavar="'YYYY-MM-DD HH:MM:SS'",
                      help="as of the last delta closed at or before this time (UTC)")
    form.add_argument("--started-in", default=None, metavar="A,B",
                      help="the row versions written in deltas A..B (Prostore's STARTED IN)")
    form.add_argument("--finished-in", default=None, metavar="A,B",
                      help="the row versions deleted in deltas A..B (Prostore's FINISHED IN)")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    p.add_argument("--engine", choices=["spark", "pyiceberg"], default="spark",
                   help="spark (default: every form) or pyiceberg (no JVM: a delta with its own tag, or the last)")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    if "." not in args.table:
        raise DeltaportError(f"table must be SOURCE.TABLE, got {args.table!r}")
    source, table = args.table.split(".", 1)
    cfg = load_config(args.config)
    if source not in cfg.source_names:
        raise DeltaportError(f"source {source!r} is not in {cfg.source_file} (sources: {', '.join(cfg.source_names)})")
    is_datamart = source in {d.name for d in cfg.datamarts}
    ranged = [(flag, cls, text) for flag, cls, text in (("--started-in", StartedIn, args.started_in),
                                                       ("--finished-in", FinishedIn, args.finished_in)) if text]
    try:
        forms = [cls(*parse_range(text, flag=flag)) for flag, cls, text in ranged]
        when = dt.datetime.fromisoformat(args.as_of) if args.as_of else None
    except ValueError as exc:
        raise DeltaportError(str(exc) if ranged else f"--as-of takes 'YYYY-MM-DD HH:MM:SS', got {args.as_of!r}")
    if when is not None and when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if args.engine == "pyiceberg":
        if forms or when is not None:
            raise DeltaportError("--engine pyiceberg reads --as-of-delta N or the last delta; the history forms "
                                 "read with Spark, or with PyIceberg from Python (docs/using.md)")
        delta, columns, rows = _pyiceberg_read(cfg, source, table, args.as_of_delta)
        if args.as_of_delta is None:
            print(f"# {source}.{table} as of delta {delta}, the last delta landed in it "
                  "(--as-of-delta N reads an earlier one)", file=sys.stderr, flush=True)
        _write(args.format, columns, rows)
        return 0
    spark = engine_for(cfg).session()  # no Dagster import: a read costs the query, not the imports
    layout = LakeLayout(cfg.lake.catalog)
    if forms and not is_datamart:
        last = last_landed_delta(spark, layout, source, table)
        if forms[0].last > last:
            raise DeltaportError(f"{source}.{table}: delta {forms[0].last} has not landed (last landed: {last})")
        columns, rows = cdc_versions_in(spark, layout, source, table, forms[0], last=last)
        _write(args.format, columns + list(SYSTEM_COLUMNS), rows)
        return 0
    if forms:
        entity = entity_as_of(spark, layout, source, table, forms[0].last)
        _write(args.format, [c.name for c in entity.columns] + list(SYSTEM_COLUMNS),
               versions_in(spark, layout, source, table, forms[0]))
        return 0
    delta = args.as_of_delta
    if when is not None:
        delta = delta_at(_close_times(spark, layout, source), when)
        if delta is None:
            raise DeltaportError(f"no delta of {source} closed at or before {when.isoformat(sep=' ')} (UTC)")
        print(f"# {source}.{table} as of delta {delta}, the last closed at or before {when.isoformat(sep=' ')}",
              file=sys.stderr, flush=True)
    if delta is None:
        delta = last_landed_delta(spark, layout, source, table)
        print(f"# {source}.{table} as of delta {delta}, the last delta landed in it "
              "(--as-of-delta N reads an earlier one)", file=sys.stderr, flush=True)
    if is_datamart:
        columns = [c.name for c in entity_as_of(spark, layout, source, table, delta).columns]
        rows = rows_as_of(spark, layout, source, table, delta)
    else:
        columns, rows = cdc_columns_as_of(spark, layout, source, table, delta)
    _write(args.format, columns, rows)
    return 0


def _close_times(spark, layout: LakeLayout, source: str) -> dict:
    """{delta: its close time, naive UTC} of the source's landed deltas, from its manifest (a change
    stream's delta time is its watermark; a delta without one is left out)."""
    from pyspark.sql import functions as F

    if not table_exists(spark, layout.meta(source, "manifest")):
        return {}
    rows = (spark.table(layout.meta(source, "manifest")).groupBy("delta_num")
            .agg(F.max("delta_date_us").alias("us")).collect())
    return {r.delta_num: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=r.us) for r in rows if r.us is not None}


def _write(fmt: str, columns: list[str], rows: list[dict]) -> None:
    if fmt == "jsonl":
        for row in rows:
            sys.stdout.write(jsonl_line(columns, row))
    else:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_value(c, row[c]) for c in columns])


def _pyiceberg_read(cfg, source: str, table: str, delta: int | None):
    from resources.lake import pyiceberg_rows

    open_table = pyiceberg_tables(cfg)
    if delta is None:
        delta = pyiceberg_rows.last_landed(open_table, source, table)
    read = pyiceberg_rows.datamart_rows if source in {d.name for d in cfg.datamarts} else pyiceberg_rows.stream_rows
    return delta, *read(open_table, source, table, delta)

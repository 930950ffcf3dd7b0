"""`deltaport sql "<Prostore SELECT>"`: a query in Prostore's dialect answered from the lake.

Table references are DATAMART.TABLE (or a change stream's SOURCE.TABLE, or a user mart
SOURCE_marts.ASSET), each with or without its own FOR SYSTEM_TIME clause: AS OF DELTA_NUM n,
AS OF 'YYYY-MM-DD hh:mm:ss' (UTC), STARTED IN (a, b), FINISHED IN (a, b); joins, subqueries,
WHERE, GROUP BY, ORDER BY, LIMIT and aliases as in any SELECT. No clause: the last delta landed.
Each table becomes a subquery on its current and history tables with the WHERE of
docs/using.md "Querying history" (platform_assets/sql_query.py); `--explain` prints that SQL
instead of running it. Prostore's forms the lake cannot answer (AS OF LATEST_UNCOMMITTED_DELTA,
the CN and TS forms, RAW, DATASOURCE_TYPE, ESTIMATE_ONLY) and syntax errors fail with one line
naming the form or the line and column, exit code 2. Rows are printed as `deltaport read` prints
them (`--format jsonl|csv`). `--engine duckdb` runs without a JVM (PyIceberg + DuckDB); `spark`
on the deployment's Spark Connect server; `auto` (default): Spark when one is configured or
already running, else DuckDB. A query given as `-` is read from stdin.
"""

from __future__ import annotations

import contextlib
import sys

from platform_assets.cli.common import add_config_option, without_pandas


def register(sub) -> None:
    p = sub.add_parser("sql", help="answer a Prostore SELECT (FOR SYSTEM_TIME ...) from the lake", description=__doc__)
    p.add_argument("query", help="the query, in Prostore's dialect (- reads it from stdin)")
    p.add_argument("--explain", action="store_true", help="print the SQL the engine would run, and run nothing")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    p.add_argument("--engine", choices=["auto", "duckdb", "spark"], default="auto",
                   help="duckdb (no JVM), spark, or auto (default: spark when configured or running, else duckdb)")
    add_config_option(p)
    p.set_defaults(run=run, short_lived=True)  # cli.main: no cyclic collector in its own process


def run(args) -> int:
    from platform_assets.config import load_config
    from platform_assets.sql_query import answer_sql, explain_sql, pick_engine

    query = sys.stdin.read() if args.query == "-" else args.query
    cfg = load_config(args.config)
    engine = pick_engine(cfg, args.engine)
    with without_pandas() if engine == "duckdb" else contextlib.nullcontext():
        if args.explain:
            answer = explain_sql(query, cfg, engine=engine)
            for note in answer.notes:
                print(f"-- {note}")
            print(f"-- engine: {answer.engine}\n{answer.sql}")
            return 0
        answer = answer_sql(query, cfg, engine=engine)
        for note in answer.notes:
            print(f"# {note}", file=sys.stderr, flush=True)
        from platform_assets.cli.arrow_format import write_csv, write_jsonl
        from platform_assets.cli.read_cmd import stdout_bytes

        (write_jsonl if args.format == "jsonl" else write_csv)(answer.rows, stdout_bytes())
    return 0


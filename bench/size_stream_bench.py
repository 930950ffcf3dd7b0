"""Does a change stream's steady delta cost O(delta) whatever the table's size? (issue 30, item 3:
"datamart and one change stream"; bench/size_bench.py is the datamart's.)

One change-stream table per size: a snapshot table of R live rows written straight to Iceberg as
delta 0 (the columns, `_order`, `_tombstone`, `_event_time_us`, `sys_from`/`sys_from_date` and
properties the stream's first MERGE creates, with history kept; its commit records the key as a
MERGE's does), then steady deltas of `--changes` changes (50% updates, 20% deletes, 30% inserts of
random keys, bench/traffic.py's planner) landed as increments (`land_cdc_increment`, from hand-made
`Change`s: decoding does not depend on the table) and applied as the stream's snapshot step does
(platform_assets/streams/delta_step.py `_apply_snapshot`: `apply_cdc_through` with history, then
`snapshot_checks` given the deltas applied). Both sizes in one process, one warm Spark Connect server.

Per delta: seconds of the apply and of the checks, and the Spark SQL executions they ran (the
server's UI REST API), as bench/size_bench.py reports them. The first delta of each size warms up;
the figure is the median of the others. Each table's end state is checked against the planner's
truth (live rows, their key sum).

    python bench/size_stream_bench.py [--small 200000] [--large 20000000] [--changes 10000] [--deltas 3]

Results: bench-results/size_stream.json and lines on stdout (both times and the ratio large/small;
goal <= 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import traffic  # noqa: E402
from bench.size_bench import add_size_args, base_rows, delta_planner, key_scan_s, row_scan_s, run_sizes, table_layout, show_sql  # noqa: E402
from bench.sql_log import SqlLog  # noqa: E402
from platform_assets.streams import checks  # noqa: E402
from resources.codecs.cdc import DELETE, UPSERT, Change  # noqa: E402
from resources.lake.cdc import KEYS_PROPERTY, apply_cdc_through, changes_frame, land_cdc_increment  # noqa: E402
from resources.lake.cdc_columns import order_key_text  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.prostore import _struct  # noqa: E402
from resources.lake.prostore_history import version_fields  # noqa: E402
from resources.lake.stream_history import stream_table_properties  # noqa: E402
from resources.spark.iceberg import commit_delta, ensure_table  # noqa: E402

KEY = ("id",)


def write_base(spark, ident: str, n_rows: int, struct, columns, properties=None) -> None:
    """Keys 1..n_rows, live, ordered before any change of the deltas, as delta 0's commit."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    table = _struct([], [*columns, ("_order", T.StringType()), ("_tombstone", T.BooleanType()),
                         ("_event_time_us", T.LongType()), *version_fields()])
    ensure_table(spark, ident, table, properties=stream_table_properties(True, 0) | (properties or {}))
    rows = base_rows(spark, n_rows, struct).select(
        "*", F.lit(order_key_text((0,))).alias("_order"), F.lit(False).alias("_tombstone"),
        F.lit(traffic.delta_date_us(0)).alias("_event_time_us"))
    commit_delta(spark, ident, rows.select(*[f.name for f in table.fields]), delta_num=0, mode="overwrite",
                 extra_summary={KEYS_PROPERTY: json.dumps(list(KEY))})


def stream_changes(planned, n: int) -> list[Change]:
    """The planner's rows of delta `n` as a change stream's changes, ordered after delta n-1's."""
    out = []
    for i, r in enumerate(planned):
        values = {k: v for k, v in r.items() if k != "sys_op"}
        op = DELETE if r["sys_op"] == 1 else UPSERT
        out.append(Change(source="bench", namespace="ns", table=traffic.TABLE, operation=op, key_columns=KEY,
                          values={"id": values["id"]} if op == DELETE else values, order_key=(n, i)))
    return out


def bench_size(spark, sql: SqlLog, n_rows: int, args) -> dict:
    from pyspark.sql import functions as F

    source, layout = f"ssize_{n_rows}", LakeLayout("lake")
    _, entity = traffic.sales_schema(source)
    struct = _struct(entity.columns, version_fields())
    columns = [(f.name, f.dataType) for f in struct.fields if f.name not in ("sys_from", "sys_from_date")]
    ident = layout.snapshot(source, traffic.TABLE)
    t = time.perf_counter()
    write_base(spark, ident, n_rows, struct, columns, table_layout(args))
    out = {"rows": n_rows, "write_base_s": round(time.perf_counter() - t, 1),
           "data_files": spark.table(f"{ident}.files").count(), "deltas": []}
    print(f"{n_rows:,} rows: stream table written in {out['write_base_s']} s, {out['data_files']} data files",
          flush=True)
    planner = delta_planner(args, n_rows)
    tables = {traffic.TABLE: KEY}
    for n in range(1, args.deltas + 1):
        changes = stream_changes(planner.delta(n, args.changes).rows, n)
        land_cdc_increment(spark, layout, source, n, {traffic.TABLE: changes_frame(spark, changes, columns)},
                           delta_date_us=traffic.delta_date_us(n))
        sql.mark()
        t0 = time.perf_counter()
        applied = apply_cdc_through(spark, layout, source, n, tables, keep_history=True)
        t1 = time.perf_counter()
        applied_sql = sql.since()
        ran = {a.table: [a.delta_num] for a in applied if not a.skipped}
        counts, results = checks.snapshot_checks(spark, layout, source, n, tables, deltas=ran)
        t2 = time.perf_counter()
        entry = {"delta": n, "apply_s": round(t1 - t0, 2), "checks_s": round(t2 - t1, 2),
                 "total_s": round(t2 - t0, 2), "apply_sql": applied_sql, "checks_sql": sql.since(),
                 "counts": counts, "key_unique": results[0].passed,
                 "checked": results[0].metadata["keys_of_deltas"].value, "load": os.getloadavg()[0]}
        out["deltas"].append(entry)
        print(f"  delta {n}: apply {entry['apply_s']} s, checks {entry['checks_s']} s, total {entry['total_s']} s "
              f"(load {entry['load']:.1f}; keys of deltas checked {entry['checked']})", flush=True)
        show_sql(entry, args.show_over)
    live = spark.table(ident).where(~F.col("_tombstone"))
    keys_ok = (live.count() == planner.alive_count()
               and live.select(F.sum(F.col("id").cast("long"))).first()[0] == planner.alive_sum())
    warm = out["deltas"][1:] or out["deltas"]
    out["key_scan_s"] = key_scan_s(spark, ident)
    out["row_scan_s"] = row_scan_s(spark, ident)
    out |= {"equal": bool(keys_ok and all(d["key_unique"] for d in out["deltas"])),
            "median_total_s": statistics.median(d["total_s"] for d in warm),
            "median_apply_s": statistics.median(d["apply_s"] for d in warm),
            "median_checks_s": statistics.median(d["checks_s"] for d in warm)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_size_args(ap, "size_stream.json")
    res = run_sizes(ap.parse_args(argv), bench_size, "size (change stream)")
    return 0 if all(s["equal"] for s in res["sizes"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())

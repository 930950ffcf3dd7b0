"""What a maintenance pass with nothing due costs a source, by its number of tables, as a ratio.

A source's tables as deltaport lays them out (snapshot tables with `delta_<N>` tags and a
history, increment, history and meta tables), `--tables` in all, each with `--commits` small
commits, all younger than `expire_after_seconds`: the state of a lake between two passes, where
nothing is due. Then, alternating, `--runs` times each:
- the pass (`maintain_source`: every table's state read in one query, then only what is due);
- the baseline, what a pass did before commit 707d694, in the same process on the same tables:
  per table its `files` counted, its tags and history start read (snapshot tables),
  `expire_snapshots` called, its `files` counted again.
Reported: the median seconds of both, their ratio, and the seconds per table. Never a timed
assertion.

    python bench/maintenance_pass_bench.py [--tables 12] [--tables 48] [--commits 3] [--runs 3]

Result: bench-results/maintenance_pass.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.lake.maintenance import _call, _timestamp, file_stats, maintain_source  # noqa: E402
from resources.lake.maintenance_settings import MaintenanceSettings  # noqa: E402
from resources.lake.prostore_history import history_start, snapshot_properties  # noqa: E402
from resources.spark.iceberg import TABLE_PROPERTIES  # noqa: E402
from resources.spark.iceberg_reads import delta_tags  # noqa: E402

# A source's namespaces and table kinds, as maintain_source walks them.
KINDS = (("", "snapshot"), ("_increment", "increment"), ("_history", "history"), ("_meta", "meta"))


def make_source(spark, catalog: str, source: str, tables: int, commits: int) -> list[tuple[str, str]]:
    """`tables` small tables spread over the source's four namespaces; [(ident, kind)]."""
    props = ", ".join(f"'{k}'='{v}'" for k, v in {**TABLE_PROPERTIES, **snapshot_properties(True)}.items())
    made = []
    for i in range(tables):
        suffix, kind = KINDS[i % len(KINDS)]
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{source}{suffix}")
        ident = f"{catalog}.{source}{suffix}.t{i}"
        spark.sql(f"CREATE TABLE {ident} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ({props})")
        for n in range(commits):
            spark.sql(f"INSERT INTO {ident} VALUES ({n}, 'v{n}')")
            if kind == "snapshot":
                spark.sql(f"ALTER TABLE {ident} CREATE TAG `delta_{n}`")
        made.append((ident, kind))
    return made


def baseline_pass(spark, tables: list[tuple[str, str]], settings: MaintenanceSettings) -> None:
    """A nothing-due pass as it was before the one query: each table asked and expired on its own."""
    for ident, kind in tables:
        spark.catalog.refreshTable(ident)
        file_stats(spark, ident)
        if kind == "snapshot":
            delta_tags(spark, ident)
            history_start(spark, ident)
        _call(spark, ident, "expire_snapshots",
              f", older_than => {_timestamp(settings.expire_after_seconds)}, retain_last => 1")
        spark.catalog.refreshTable(ident)
        file_stats(spark, ident)


def measure(spark, catalog: str, count: int, commits: int, runs: int) -> dict:
    source = f"src{count}"
    tables = make_source(spark, catalog, source, count, commits)
    settings = MaintenanceSettings()
    times: dict[str, list[float]] = {"pass": [], "baseline": []}
    for run in range(runs + 1):  # the first round warms both up, untimed
        for name in (("pass", "baseline") if run % 2 else ("baseline", "pass")):
            began = time.perf_counter()
            if name == "pass":
                done = maintain_source(spark, catalog, source, settings)
                assert len(done) == count and not any(t.done for t in done), [t.text() for t in done]
            else:
                baseline_pass(spark, tables, settings)
            if run:
                times[name].append(time.perf_counter() - began)
    p, b = statistics.median(times["pass"]), statistics.median(times["baseline"])
    row = {"tables": count, "pass_s": round(p, 3), "baseline_s": round(b, 3), "ratio": round(p / b, 3),
           "pass_s_per_table": round(p / count, 4), "baseline_s_per_table": round(b / count, 4),
           "runs": {k: [round(v, 3) for v in vs] for k, vs in times.items()}}
    print(f"{count} tables, nothing due: the pass {p:.2f} s, the baseline (each table on its own) {b:.2f} s: "
          f"{p / b:.3f}x ({p / count * 1000:.0f} ms against {b / count * 1000:.0f} ms a table)", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, action="append", help="tables in the source (repeatable; 12, 48)")
    ap.add_argument("--commits", type=int, default=3, help="commits per table")
    ap.add_argument("--runs", type=int, default=3, help="timed passes of each kind, alternating")
    args = ap.parse_args(argv)

    from bench.engine import bench_engine

    with bench_engine(Path(tempfile.mkdtemp(prefix="maintenance-pass-bench-"))) as engine:
        rows = [measure(engine.spark, "lake", n, args.commits, args.runs) for n in (args.tables or [12, 48])]
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    (out / "maintenance_pass.json").write_text(json.dumps({"commits_per_table": args.commits, "sizes": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

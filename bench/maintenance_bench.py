"""What table maintenance buys a table that has aged (issue 30): read cost and files, as ratios.

The table is a snapshot table as deltaport lays it out: format 2, merge-on-read, 20 metadata
files kept. It holds `--rows` rows. Then `--deltas` deltas each MERGE `--changes` updated rows
and tag `delta_<N>`, as a steady trickle of small deltas does. At every `--every`-th delta:
- the time of a full read of the current state (count and a checksum);
- the table's data and delete files;
- the size of its metadata file.
Then maintenance runs (resources/lake/maintenance.py: compaction, expiry) and the same read is
timed again, beside a freshly written and compacted copy of the same rows (issue 30's yardstick). Reported
as ratios in one process, never as timed assertions.

The table is marked as one whose history answers every delta (`deltaport.history-from` 0, as a
table deltaport creates with history on), so maintenance drops all tags but the last
`--keep-tags`; `--expire-after` 0 (the default here) stands for an aged lake, where the deltas'
commits are older than `expire_after_seconds` (3600 in production).

    python bench/maintenance_bench.py [--rows 100000] [--deltas 500] [--changes 1] [--every 100]

Result: bench-results/maintenance.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.lake.maintenance import MaintenanceSettings, file_stats, maintain_table  # noqa: E402
from resources.lake.prostore import SNAPSHOT_TABLE_PROPERTIES  # noqa: E402
from resources.lake.prostore_history import snapshot_properties  # noqa: E402
from resources.spark.iceberg import TABLE_PROPERTIES  # noqa: E402


def timed_read(spark, ident: str, repeat: int = 3) -> float:
    """Best of `repeat` full reads of the current state (every column goes through the checksum)."""
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        spark.sql(f"SELECT count(*), sum(hash(*)) FROM {ident}").collect()
        best = min(best, time.perf_counter() - began)
    return best


def metadata_bytes(warehouse: Path, namespace: str, table: str) -> int:
    files = sorted((warehouse / namespace / table / "metadata").glob("v*.metadata.json"),
                   key=lambda p: int(p.name[1:].split(".")[0]))
    return files[-1].stat().st_size if files else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--deltas", type=int, default=500)
    ap.add_argument("--changes", type=int, default=1, help="rows updated per delta")
    ap.add_argument("--every", type=int, default=100, help="measure every this many deltas")
    ap.add_argument("--keep-tags", type=int, default=MaintenanceSettings.keep_tags)
    ap.add_argument("--expire-after", type=float, default=0.0, help="maintenance's expire_after_seconds")
    args = ap.parse_args(argv)

    from platform_assets.config import parse_config
    from platform_assets.engine import engine_for

    work = Path(tempfile.mkdtemp(prefix="maintenance-bench-"))
    cfg = parse_config({"sources": [{"name": "bench", "backup_topic": "unused"}],
                        "lake": {"catalog": "mb", "warehouse": str(work / "lake")}, "state_dir": str(work / "state")},
                       str(work / "deltaport.yaml"))
    engine = engine_for(cfg)
    try:
        return _run(args, engine.session(), work)
    finally:  # its own embedded server: stopped, not left to its idle timeout
        if not engine.remote_url():
            engine.local_server().stop()


def _run(args, spark, work: Path) -> int:
    props = ", ".join(f"'{k}'='{v}'" for k, v in {**TABLE_PROPERTIES, **SNAPSHOT_TABLE_PROPERTIES}.items())
    marked = ", ".join(f"'{k}'='{v}'" for k, v in {**TABLE_PROPERTIES, **snapshot_properties(True)}.items())
    spark.sql("CREATE NAMESPACE IF NOT EXISTS mb.db")
    spark.sql(f"CREATE TABLE mb.db.t (id BIGINT, v STRING, n BIGINT) USING iceberg TBLPROPERTIES ({marked})")
    spark.sql(f"INSERT INTO mb.db.t SELECT id, concat('row ', id), 0 FROM range({args.rows})")
    report = {"rows": args.rows, "changes_per_delta": args.changes, "points": []}
    print(f"{args.rows} rows; {args.deltas} deltas of {args.changes} updated row(s), a MERGE and a tag each")
    for n in range(1, args.deltas + 1):
        lo = (n * 7919 * args.changes) % max(1, args.rows - args.changes)
        spark.sql(f"MERGE INTO mb.db.t t USING (SELECT id, concat('v', {n}) AS v, {n} AS n FROM range({lo}, "
                  f"{lo + args.changes})) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        spark.sql(f"ALTER TABLE mb.db.t CREATE OR REPLACE TAG `delta_{n}`")
        if n % args.every == 0 or n == args.deltas:
            data, deletes, _ = file_stats(spark, "mb.db.t")
            point = {"delta": n, "read_seconds": round(timed_read(spark, "mb.db.t"), 3), "data_files": data,
                     "delete_files": deletes, "metadata_bytes": metadata_bytes(work / "lake", "db", "t")}
            report["points"].append(point)
            print(f"  delta {n}: read {point['read_seconds']} s, {data} data files, {deletes} delete files, "
                  f"metadata file {point['metadata_bytes']} bytes", flush=True)
    aged = report["points"][-1]["read_seconds"]
    done = maintain_table(spark, "mb.db.t", "snapshot", MaintenanceSettings(
        delete_files_threshold=1, keep_tags=args.keep_tags, expire_after_seconds=args.expire_after))
    print(f"maintenance: {done.text()}")
    maintained = timed_read(spark, "mb.db.t")
    spark.sql(f"CREATE TABLE mb.db.fresh USING iceberg TBLPROPERTIES ({props}) AS SELECT * FROM mb.db.t")
    fresh_files = file_stats(spark, "mb.db.fresh")[0]
    # Issue 30's yardstick: a freshly compacted copy (the same rows, compacted as maintenance does).
    maintain_table(spark, "mb.db.fresh", "snapshot", MaintenanceSettings(delete_files_threshold=1, data_files_threshold=1))
    fresh = timed_read(spark, "mb.db.fresh")
    report.update(maintenance=done.text(), aged_read_seconds=aged, maintained_read_seconds=round(maintained, 3),
                  metadata_bytes_after=metadata_bytes(work / "lake", "db", "t"),
                  fresh_copy_read_seconds=round(fresh, 3), aged_vs_fresh=round(aged / fresh, 2),
                  fresh_copy_files_before_compaction=fresh_files, fresh_copy_files=file_stats(spark, "mb.db.fresh")[0],
                  maintained_vs_fresh=round(maintained / fresh, 2))
    print(f"read of the current state: aged {aged:.3f} s ({aged / fresh:.2f}x a freshly compacted copy), after "
          f"maintenance {maintained:.3f} s ({maintained / fresh:.2f}x), freshly compacted copy {fresh:.3f} s "
          f"({fresh_files} -> {report['fresh_copy_files']} files); metadata file "
          f"{report['points'][-1]['metadata_bytes']} -> {report['metadata_bytes_after']} bytes")
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    (out / "maintenance.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

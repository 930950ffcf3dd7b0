"""What Dagster costs as a source ages, with and without the partition window (issue 43).

For each size N (`--sizes`), a SQLite Dagster instance of its own is aged to N deltas of one
datamart, as its runs leave it: N dynamic partitions of `<dm>_deltas`; one run per
`--deltas-per-run` deltas (a real run's record and tags: `deltaport/datamart`, the partition or
the range's tags); per delta, a materialization of each of the five assets of the group
(signal_events, changelog, increment, snapshot, history) and a check evaluation (snapshot's
primary_key_unique), in the index shard where Dagster's asset queries read them.

How the aging is cheap: the first run and its events are written through Dagster's own API; its
rows (runs, run_tags, event_logs, asset_check_executions) are then copied for every other run
and delta in batched INSERTs, its run id and partition key replaced. Not aged: each run's own
event shard file (`history/runs/<run_id>.db`, which the UI's run page reads and the asset
queries do not): the sizes below count the index and the runs database only, so they
understate an instance's files (issue 43's 3.5 GB at 300k were mostly those shards).

Then, on the aged instance, without the window and after retiring to the window
(`--window`, platform_assets/retirement.py's own passes, timed):
- `get_materialized_partitions(snapshot)`: what the lag, a cursorless resume and range-key
  resolution read before the landed mark;
- the asset status cache rebuild of the five assets after one new partition (a dynamic
  partitions definition's identity is a hash of its keys: a new delta throws every cache away;
  this is what the UI's first lineage view and partitions page after a new delta pay);
- the Dagster calls of an idle sensor tick (resume from the landed mark, a run in flight, one
  `has_dynamic_partition`), and the old cursorless resume (every materialized partition);
- the events in the index and the runs, and the index and runs databases' size.
Reported as ratios of the largest size to the smallest, in one process; never asserted.

    python bench/partitions_bench.py [--sizes 1000,20000] [--window 1000] [--deltas-per-run 1]

Result: bench-results/partitions.json.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DM = "marketing"
ASSETS = ("signal_events", "changelog", "increment", "snapshot", "history")
CHECK = "primary_key_unique"
BATCH = 20_000


def _template(instance, first_key: str, run_id: str) -> None:
    """The first run of the story and its events, through Dagster's own API."""
    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry

    from platform_assets.prostore.sensors import datamart_tags

    instance.add_run(dg.DagsterRun(job_name=f"{DM}_delta_job", run_id=run_id, status=dg.DagsterRunStatus.SUCCESS,
                                   tags={**datamart_tags(DM), "dagster/partition": first_key}))

    def store(event: DagsterEvent) -> None:
        instance.event_log_storage.store_event(EventLogEntry(
            error_info=None, level=20, user_message="", run_id=run_id, timestamp=time.time(), dagster_event=event,
            job_name=f"{DM}_delta_job", step_key=f"{DM}_deltas"))

    for asset in ASSETS:
        store(DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name=f"{DM}_delta_job",
                           step_key=f"{DM}_deltas", event_specific_data=StepMaterializationData(
                               dg.AssetMaterialization(dg.AssetKey([DM, asset]), partition=first_key,
                                                       metadata={"rows": 100, "seconds": 1.5, "deltas": "0"}))))
    evaluation = dg.AssetCheckEvaluation(asset_key=dg.AssetKey([DM, "snapshot"]), check_name=CHECK, passed=True,
                                         metadata={"duplicates": 0}, partition=first_key)
    store(DagsterEvent(event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value, job_name=f"{DM}_delta_job",
                       step_key=f"{DM}_deltas", event_specific_data=evaluation))


def age(home: Path, deltas: int, per_run: int) -> float:
    """A SQLite instance in `home` aged to `deltas` deltas (module docstring); seconds taken."""
    import dagster as dg

    from platform_assets.prostore.partitions import delta_partitions, partition_key

    began = time.perf_counter()
    first_run = str(uuid.uuid4())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = [partition_key(n) for n in range(deltas)]
        for i in range(0, deltas, BATCH):
            instance.add_dynamic_partitions(delta_partitions(DM).name, keys[i:i + BATCH])
        _template(instance, keys[0], first_run)
    runs_db, index_db = sqlite3.connect(home / "history" / "runs.db"), sqlite3.connect(home / "history" / "runs" / "index.db")
    tables = {runs_db: ("runs", "run_tags"), index_db: ("event_logs", "asset_check_executions")}
    templates = {}
    for db, names in tables.items():
        for name in names:
            cols = [c[1] for c in db.execute(f"PRAGMA table_info({name})") if c[1] != "id"]
            rows = db.execute(f"SELECT {', '.join(cols)} FROM {name} WHERE run_id = ?", (first_run,)).fetchall()
            templates[(db, name)] = (cols, rows)

    def copy(value, run_id: str, key: str):
        return value.replace(first_run, run_id).replace(keys[0], key) if isinstance(value, str) else value

    # Each run of `per_run` deltas: its record and tags once, its deltas' events each.
    pending: dict = {k: [] for k in templates}
    for start in range(0, deltas, per_run):
        run_id = first_run if start == 0 else str(uuid.uuid4())  # the first run is the template's
        span = keys[start:start + per_run]
        for (db, name), (cols, rows) in templates.items():
            if name in ("runs", "run_tags"):  # tagged by its first delta: ranges are not told apart here
                targets = [] if start == 0 else span[:1]
            else:
                targets = [k for k in span if k != keys[0]]
            for key in targets:
                pending[(db, name)] += [tuple(copy(v, run_id, key) for v in row) for row in rows]
        if start // per_run % 500 == 0 or start + per_run >= deltas:
            for (db, name), rows in pending.items():
                if rows:
                    cols = templates[(db, name)][0]
                    db.executemany(f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                   rows)
                    rows.clear()
            runs_db.commit()
            index_db.commit()
    runs_db.close()
    index_db.close()
    return time.perf_counter() - began


def _timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def measure(home: Path, marks) -> dict:
    """The figures of one instance (module docstring), seconds and bytes."""
    import dagster as dg
    from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

    from platform_assets.lag import landed_through
    from platform_assets.prostore.partitions import delta_partitions, partition_key
    from platform_assets.prostore.sensors import run_in_flight

    parts = delta_partitions(DM)
    snapshot = dg.AssetKey([DM, "snapshot"])
    with dg.DagsterInstance.from_config(str(home)) as instance:
        def rebuild() -> None:
            for asset in ASSETS:
                get_and_update_asset_status_cache_value(instance, dg.AssetKey([DM, asset]), parts)

        rebuild()  # warm: the cache as a live UI left it
        landed = marks.get(DM).landed_through

        def new_delta_then_rebuild() -> None:
            nonlocal landed
            landed += 1
            instance.add_dynamic_partitions(parts.name, [partition_key(landed)])
            rebuild()

        def idle_tick() -> None:
            landed_through(marks, instance, DM)
            run_in_flight(instance, DM)
            instance.has_dynamic_partition(parts.name, partition_key(landed))

        out = {
            "partitions": len(instance.get_dynamic_partitions(parts.name)),
            "materialized_partitions_s": _timed(lambda: instance.get_materialized_partitions(snapshot)),
            "status_rebuild_after_new_delta_s": _timed(new_delta_then_rebuild),
            "idle_tick_dagster_calls_s": _timed(idle_tick, repeat=5),
            "old_cursorless_resume_s": _timed(lambda: max(int(k) for k in instance.get_materialized_partitions(snapshot))),
        }
        marks.landed(DM, landed)
    with sqlite3.connect(home / "history" / "runs" / "index.db") as db:
        out["events_in_index"] = db.execute("SELECT count(*) FROM event_logs").fetchone()[0]
    with sqlite3.connect(home / "history" / "runs.db") as db:
        out["runs"] = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    # SQLite reuses the pages freed by retirement but does not give them back: the files of an
    # instance that aged before its window stay at their peak unless VACUUMed once.
    out["instance_bytes"] = sum(p.stat().st_size for p in (home / "history").glob("*.db")) + \
        (home / "history" / "runs" / "index.db").stat().st_size
    return out


def retire_all(home: Path, marks, window: int) -> tuple[float, int]:
    """The retirement passes of the window until the instance is within it: seconds, passes."""
    import dagster as dg

    from platform_assets.retirement import retire

    began, passes = time.perf_counter(), 0
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while True:
            passes += 1
            done = retire(instance, DM, marks, marks.get(DM).landed_through - window)
            if done.done and done.runs == 0:
                break
    return time.perf_counter() - began, passes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,20000", help="deltas of each aged instance, comma-separated")
    ap.add_argument("--window", type=int, default=1000, help="sensor.partition_window")
    ap.add_argument("--deltas-per-run", type=int, default=1)
    args = ap.parse_args(argv)
    from resources.state.delta_marks import DeltaMarks

    report = {"window": args.window, "deltas_per_run": args.deltas_per_run, "sizes": {}}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="partitions-bench-") as tmp:
            home = Path(tmp)
            aged = age(home, size, args.deltas_per_run)
            marks = DeltaMarks(home / "state.sqlite")
            marks.landed(DM, size - 1)
            row = {"aged_s": round(aged, 1), "without_window": measure(home, marks)}
            seconds, passes = retire_all(home, marks, args.window)
            row["retirement_s"], row["retirement_passes"] = round(seconds, 1), passes
            row["with_window"] = measure(home, marks)
        report["sizes"][size] = row
        print(f"{size} deltas (aged in {row['aged_s']} s; retired to {args.window} in {row['retirement_s']} s, "
              f"{passes} passes):")
        for name in row["without_window"]:
            before, after = row["without_window"][name], row["with_window"][name]
            print(f"  {name:34s} without {before:>14.4f}   with the window {after:>14.4f}")
    report["ratios"] = ratios(report["sizes"])
    path = ROOT / "bench-results" / "partitions.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return 0


def ratios(rows: dict) -> dict:
    """Each timed figure and the size, largest instance over smallest, without and with the window."""
    if len(rows) < 2:
        return {}
    small, big = rows[min(rows)], rows[max(rows)]
    print(f"ratios {max(rows)} / {min(rows)} deltas (flat is 1.0):")
    out = {}
    for name in (n for n in small["without_window"] if n not in ("partitions", "events_in_index", "runs")):
        out[name] = {k: big[k][name] / small[k][name] if small[k][name] else None
                     for k in ("without_window", "with_window")}
        print(f"  {name:34s} without {out[name]['without_window']:.2f}x   with the window {out[name]['with_window']:.2f}x")
    return out


if __name__ == "__main__":
    sys.exit(main())

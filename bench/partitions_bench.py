"""What Dagster costs as a source ages, with and without the partition window (issue 43).

For each size N (`--sizes`), a Dagster instance of its own (SQLite; with `--postgres`, a new
database of a throwaway PostgreSQL server, tests/support/postgres.py, configured as
deploy/dagster-postgres.yaml) is aged to N deltas of one datamart, as its runs leave it: N dynamic partitions of `<dm>_deltas`; one run per
`--deltas-per-run` deltas (a real run's record and tags: `deltaport/datamart`, the partition or
the range's tags); per delta, a materialization of each of the five assets of the group
(signal_events, changelog, increment, snapshot, history) and a check evaluation (snapshot's
primary_key_unique), in the index shard where Dagster's asset queries read them.

How the aging is cheap: the first run and its events are written through Dagster's own API; its
rows (runs, run_tags, event_logs, asset_check_executions) are then copied for every other run
and delta in batched INSERTs, its run id and partition key replaced. Not aged: each run's own
event shard file (`history/runs/<run_id>.db`, which the UI's run page reads and the asset
queries do not): the sizes below count the index and the runs database only, so they
understate an instance's files (issue 43's 3.5 GB at 300k were mostly those shards). On
PostgreSQL every event is in the one database: the size is that of the aged tables and the
partitions' (`pg_total_relation_size`, with their indexes).

Then, on the aged instance, without the window and after retiring to the window
(`--window`, platform_assets/retirement.py's own passes, timed):
- `get_materialized_partitions(snapshot)`: what the lag, a cursorless resume and range-key
  resolution read before the landed mark;
- the asset status cache rebuild of the five assets after one new partition (a dynamic
  partitions definition's identity is a hash of its keys: a new delta throws every cache away;
  this is what the UI's first lineage view and partitions page after a new delta pay);
- the Dagster calls of an idle sensor tick (resume from the landed mark, a run in flight, one
  `has_dynamic_partition`), and the old cursorless resume (every materialized partition);
- the events in the index, the check executions and the runs, and the instance's size.
Reported as ratios of the largest size to the smallest, in one process; never asserted.

    python bench/partitions_bench.py [--sizes 1000,20000] [--window 1000] [--deltas-per-run 1] [--postgres]

Result: bench-results/partitions.json (partitions-postgres.json with `--postgres`).
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
# The tables the aging copies rows into, and the file each lives in on SQLite.
TABLES = {"runs": "runs.db", "run_tags": "runs.db", "event_logs": "runs/index.db",
          "asset_check_executions": "runs/index.db"}


class Tables:
    """The instance's aged tables, through the database driver beneath Dagster: sqlite3 on the
    two SQLite files, psycopg2 on the PostgreSQL database (`pg`: its connection arguments)."""

    def __init__(self, home: Path, pg: dict | None):
        self.pg = pg
        if pg is None:
            files = {f: sqlite3.connect(home / "history" / f) for f in set(TABLES.values())}
            self.of = {t: files[f] for t, f in TABLES.items()}
        else:
            import psycopg2

            db = psycopg2.connect(**pg)
            self.of = dict.fromkeys(TABLES, db)
        self.mark = "?" if pg is None else "%s"

    def rows(self, table: str, sql: str, args: tuple = ()) -> list:
        cur = self.of[table].cursor()
        cur.execute(sql, args)
        return cur.fetchall()

    def columns(self, table: str) -> list[str]:
        if self.pg is None:
            names = [c[1] for c in self.rows(table, f"PRAGMA table_info({table})")]
        else:
            names = [r[0] for r in self.rows(table, "SELECT column_name FROM information_schema.columns WHERE "
                                                    "table_name = %s ORDER BY ordinal_position", (table,))]
        return [n for n in names if n != "id"]

    def insert(self, table: str, cols: list[str], rows: list) -> None:
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join([self.mark] * len(cols))})"
        self.of[table].cursor().executemany(sql, rows)

    def count(self, table: str) -> int:
        return self.rows(table, f"SELECT count(*) FROM {table}")[0][0]

    def size(self, home: Path) -> int:
        """Bytes of the instance's files (SQLite) or of the aged tables and partitions with their
        indexes (PostgreSQL)."""
        if self.pg is None:
            return sum((home / "history" / f).stat().st_size for f in set(TABLES.values()))
        names = [*TABLES, "dynamic_partitions"]
        return int(self.rows("runs", f"SELECT {' + '.join(['pg_total_relation_size(%s)'] * len(names))}",
                             tuple(names))[0][0])

    def commit(self) -> None:
        for db in set(self.of.values()):
            db.commit()

    def close(self) -> None:
        for db in set(self.of.values()):
            db.close()


def _template(instance, first_key: str, run_id: str) -> None:
    """The first run of the story and its events, through Dagster's own API."""
    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry

    from platform_assets.deltas.requests import source_tags

    instance.add_run(dg.DagsterRun(job_name=f"{DM}_delta_job", run_id=run_id, status=dg.DagsterRunStatus.SUCCESS,
                                   tags={**source_tags(DM), "dagster/partition": first_key}))

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


def age(home: Path, deltas: int, per_run: int, pg: dict | None = None, first: int = 0) -> float:
    """The instance of `home` aged to `deltas` deltas (module docstring), those from `first` on
    (a windowed deployment's: bench/partitions_ui_bench.py); seconds taken."""
    import dagster as dg

    from platform_assets.deltas.partitions import delta_partitions, partition_key

    began = time.perf_counter()
    first_run = str(uuid.uuid4())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = [partition_key(n) for n in range(first, deltas)]
        for i in range(0, len(keys), BATCH):
            instance.add_dynamic_partitions(delta_partitions(DM).name, keys[i:i + BATCH])
        _template(instance, keys[0], first_run)
    tables = Tables(home, pg)
    templates = {}
    for name in TABLES:
        cols = tables.columns(name)
        templates[name] = (cols, tables.rows(name, f"SELECT {', '.join(cols)} FROM {name} WHERE run_id = "
                                                   f"{tables.mark}", (first_run,)))

    def copy(value, run_id: str, key: str):
        return value.replace(first_run, run_id).replace(keys[0], key) if isinstance(value, str) else value

    # Each run of `per_run` deltas: its record and tags once, its deltas' events each.
    pending: dict = {k: [] for k in templates}
    for start in range(0, len(keys), per_run):
        run_id = first_run if start == 0 else str(uuid.uuid4())  # the first run is the template's
        span = keys[start:start + per_run]
        for name, (cols, rows) in templates.items():
            if name in ("runs", "run_tags"):  # tagged by its first delta: ranges are not told apart here
                targets = [] if start == 0 else span[:1]
            else:
                targets = [k for k in span if k != keys[0]]
            for key in targets:
                pending[name] += [tuple(copy(v, run_id, key) for v in row) for row in rows]
        if start // per_run % 500 == 0 or start + per_run >= len(keys):
            for name, rows in pending.items():
                if rows:
                    tables.insert(name, templates[name][0], rows)
                    rows.clear()
            tables.commit()
    tables.close()
    return time.perf_counter() - began


def _timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def idle_tick(instance, marks) -> None:
    """The Dagster calls of a sensor's idle tick: resume from the landed mark, a run in flight,
    the newest delta's partition."""
    from platform_assets.lag import landed_through
    from platform_assets.deltas.partitions import delta_partitions, partition_key
    from platform_assets.deltas.requests import run_in_flight

    landed_through(marks, instance, DM)
    run_in_flight(instance, DM)
    instance.has_dynamic_partition(delta_partitions(DM).name, partition_key(marks.get(DM).landed_through))


def measure(home: Path, marks, pg: dict | None = None) -> dict:
    """The figures of one instance (module docstring), seconds and bytes."""
    import dagster as dg
    from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

    from platform_assets.deltas.partitions import delta_partitions, partition_key

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

        out = {
            "partitions": len(instance.get_dynamic_partitions(parts.name)),
            "materialized_partitions_s": _timed(lambda: instance.get_materialized_partitions(snapshot)),
            "status_rebuild_after_new_delta_s": _timed(new_delta_then_rebuild),
            "idle_tick_dagster_calls_s": _timed(lambda: idle_tick(instance, marks), repeat=5),
            "old_cursorless_resume_s": _timed(lambda: max(int(k) for k in instance.get_materialized_partitions(snapshot))),
        }
        marks.landed(DM, landed)
    tables = Tables(home, pg)
    out["events_in_index"], out["runs"] = tables.count("event_logs"), tables.count("runs")
    out["check_executions"] = tables.count("asset_check_executions")
    # SQLite reuses the pages freed by retirement but does not give them back: the files of an
    # instance that aged before its window stay at their peak unless VACUUMed once (PostgreSQL's
    # tables likewise until a VACUUM FULL; autovacuum makes the space reusable, not smaller).
    out["instance_bytes"] = tables.size(home)
    tables.close()
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
    ap.add_argument("--postgres", action="store_true", help="a PostgreSQL instance (a throwaway server) per size")
    args = ap.parse_args(argv)
    from resources.state.delta_marks import DeltaMarks

    report = {"window": args.window, "deltas_per_run": args.deltas_per_run, "postgres": args.postgres, "sizes": {}}
    server = None
    if args.postgres:
        from tests.support.postgres import start_postgres

        server = start_postgres()
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            with tempfile.TemporaryDirectory(prefix="partitions-bench-") as tmp:
                home = Path(tmp)
                pg = on_postgres(home, server) if server is not None else None
                aged = age(home, size, args.deltas_per_run, pg)
                marks = DeltaMarks(home / "state.sqlite")
                marks.landed(DM, size - 1)
                row = {"aged_s": round(aged, 1), "without_window": measure(home, marks, pg)}
                seconds, passes = retire_all(home, marks, args.window)
                row["retirement_s"], row["retirement_passes"] = round(seconds, 1), passes
                row["with_window"] = measure(home, marks, pg)
            report["sizes"][size] = row
            _print_size(size, row, args.window)
    finally:
        if server is not None:
            server.stop()
    report["ratios"] = ratios(report["sizes"])
    path = ROOT / "bench-results" / ("partitions-postgres.json" if args.postgres else "partitions.json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return 0


def on_postgres(home: Path, server) -> dict:
    """`home`'s dagster.yaml on a new database of `server`, as deploy/dagster-postgres.yaml reads
    it (from DAGSTER_PG_* in this process's environment, set here: a bench, not an import);
    psycopg2's connection arguments for the same database."""
    import os

    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster-postgres.yaml").read_text())
    env = server.dagster_env(server.database("partitions"))
    os.environ.update(env)
    return {"host": env["DAGSTER_PG_HOST"], "port": int(env["DAGSTER_PG_PORT"]), "dbname": env["DAGSTER_PG_DB"],
            "user": env["DAGSTER_PG_USER"], "password": env["DAGSTER_PG_PASSWORD"]}


def _print_size(size: int, row: dict, window: int) -> None:
    print(f"{size} deltas (aged in {row['aged_s']} s; retired to {window} in {row['retirement_s']} s, "
          f"{row['retirement_passes']} passes):", flush=True)
    for name in row["without_window"]:
        before, after = row["without_window"][name], row["with_window"][name]
        print(f"  {name:34s} without {before:>14.4f}   with the window {after:>14.4f}", flush=True)


def ratios(rows: dict) -> dict:
    """Each timed figure and the size, largest instance over smallest, without and with the window."""
    if len(rows) < 2:
        return {}
    small, big = rows[min(rows)], rows[max(rows)]
    print(f"ratios {max(rows)} / {min(rows)} deltas (flat is 1.0):")
    out = {}
    for name in (n for n in small["without_window"]
                 if n not in ("partitions", "events_in_index", "runs", "check_executions")):
        out[name] = {k: big[k][name] / small[k][name] if small[k][name] else None
                     for k in ("without_window", "with_window")}
        print(f"  {name:34s} without {out[name]['without_window']:.2f}x   with the window {out[name]['with_window']:.2f}x")
    return out


if __name__ == "__main__":
    sys.exit(main())

"""Faults in figures (issue 43), kills during retirement: `deltaport sync` SIGKILLed inside a pass
of the partition window (platform_assets/retirement.py), then the next `sync` converges.

The kills' story (bench/fault_kills.py) with five deltas, one run each, a window of 1 and
maintenance (so retirement) due every 2 deltas: the pass of delta 1's run retires delta 0, the
pass of delta 3's run retires 1-2, deleting two runs. Each case kills that second pass at a point
of its own (resources/failpoints.py); the recovering `sync` lands delta 4, and its run's pass
goes on where the killed one stopped (the mark moves last, so it retires 1-3 at once).

Checked per case, besides the kills' lake checks (every snapshot table as of every delta equals
the truth, increments once, every delta tagged):
- the first sync died at the point, the second succeeded;
- the next pass finished: the `retired_through` mark is at most `every - 1` deltas behind
  `landed_through - window`, and `landed_through` is the last delta;
- no delta is left half-retired: every delta above the mark has its partition and its
  materialized snapshot, none at or below it has either, and every run the instance keeps of the
  source covers a delta above the mark (a run all of whose deltas are retired is gone);
- the SQLite instance keeps no event file, and no compute log folder, of a run it no longer holds.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from bench.fault_kills import DM, KillRow, KillStory, _sync, case_folder, compare_with_truth

RETIREMENT_CASES: dict[str, str] = {
    # Counts are per process: pass 1 (delta 1's run) passes each point once, so @2 is pass 2.
    "kill-retirement-after-partitions": "retire.partitions_deleted@2",  # partitions 1-2 gone, their runs not
    "kill-retirement-between-runs": "retire.run_deleted@2",  # run of delta 1 gone, delta 2's not
    "kill-retirement-before-mark": "retire.runs_deleted@2",  # everything gone but the mark
}
DELTAS, WINDOW, EVERY = 5, 1, 2


def _held(home: Path) -> dict:
    """What the case's instance holds of the source: partitions, materialized snapshot
    partitions, each run's deltas (with its status), and the runs' event files and compute logs."""
    import dagster as dg

    from platform_assets.deltas.requests import source_tags
    from platform_assets.retirement import deltas_of_run

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags=source_tags(DM)))
        held = {"partitions": sorted(int(k) for k in instance.get_dynamic_partitions(f"{DM}_deltas")),
                "materialized": sorted(int(k) for k in instance.get_materialized_partitions(
                    dg.AssetKey([DM, "snapshot"]))),
                "runs": sorted((deltas_of_run(r.tags) or [], r.status.value) for r in runs)}
        run_ids = {r.run_id for r in instance.get_runs()}
    # index.db, and .db: the shard of runless events (the lag observations `sync` reports)
    files = {p.stem for p in (home / "history" / "runs").glob("*.db") if p.name not in ("index.db", ".db")}
    held["event_files_of_no_run"] = len(files - run_ids)
    logs = {p.name for p in (home / "storage").glob("*") if p.is_dir() and (p / "compute_logs").exists()}
    held["log_folders_of_no_run"] = len(logs - run_ids)
    return held


def _marks(folder: Path):
    from resources.state.delta_marks import DeltaMarks
    from resources.state.store import state_store

    return DeltaMarks(state_store(str(folder / "state" / "index.sqlite"))).get(DM)


def judge_retirement(row: KillRow, held: dict, landed: int | None, retired: int | None) -> None:
    """Add to `row`'s problems what the recovered instance says against the guarantees above."""
    if landed != DELTAS - 1:
        row.problems.append(f"landed_through is {landed}, not the last delta {DELTAS - 1}")
        return
    if retired is None or retired < landed - WINDOW - (EVERY - 1):
        row.problems.append(f"the next pass did not finish: retired_through {retired}, landed_through {landed}")
        return
    window = list(range(retired + 1, DELTAS))
    for what in ("partitions", "materialized"):
        if held[what] != window:
            row.problems.append(f"{what} {held[what]}, not the window {window} (retired_through {retired})")
    stale = [(deltas, status) for deltas, status in held["runs"] if not deltas or max(deltas) <= retired]
    if stale:
        row.problems.append(f"runs all of whose deltas are retired are still held: {stale}")
    if held["event_files_of_no_run"]:
        row.problems.append(f"{held['event_files_of_no_run']} event files of runs the instance no longer holds")
    if held["log_folders_of_no_run"]:
        row.problems.append(f"{held['log_folders_of_no_run']} compute log folders of runs the instance no longer holds")


def run_retirement_case(bootstrap: str, remote: str, story: KillStory, case: str, work: Path,
                        *, timeout: float = 900) -> KillRow:
    """`story`: published with DELTAS deltas (`publish_story(..., deltas=DELTAS)`)."""
    spec = RETIREMENT_CASES[case]
    row = KillRow(case, spec)
    folder, catalog, env = case_folder(work, case, bootstrap, story, remote,
                                       sensor={"max_deltas_per_run": 1, "partition_window": WINDOW},
                                       maintenance={"every_deltas": EVERY})
    first = _sync(folder, {**env, "DELTAPORT_FAILPOINTS": spec}, timeout)
    row.killed = first.returncode == -9
    if not row.killed:
        row.problems.append(f"the first sync did not die at {spec} (exit {first.returncode}): "
                            f"{(first.stdout + first.stderr)[-1500:]}")
    marks = _marks(folder)
    row.left_by_kill = {**_held(folder / ".dagster"), "landed_through": marks.landed_through,
                        "retired_through": marks.retired_through}
    began = time.perf_counter()
    second: subprocess.CompletedProcess = _sync(folder, env, timeout)
    row.recover_seconds = round(time.perf_counter() - began, 2)
    row.recovered = second.returncode == 0
    if not row.recovered:
        row.problems.append(f"the recovering sync failed (exit {second.returncode}): "
                            f"{(second.stdout + second.stderr)[-1500:]}")
    marks = _marks(folder)
    judge_retirement(row, _held(folder / ".dagster"), marks.landed_through, marks.retired_through)
    compare_with_truth(row, remote, catalog, folder / "lake", story.scenario)
    row.judge()
    return row

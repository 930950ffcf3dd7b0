"""Faults in figures (issue 31): `deltaport sync` SIGKILLed while it starts the embedded Spark
server, 1 s after the server's JVM was launched (``spark.server_launched~1000``; the server takes
6-30 s to answer). Before issue 31 that server ran on unrecorded: the next command started a
second one, `deltaport spark stop` stopped only that one, and each such kill leaked ~1 GB.

The story, the lake checks and the row are the kills' (bench/fault_kills.py); the engine is the
embedded one of the case's folder (no `spark.remote`), as `make demo` and a cron `sync` run.
Checked besides, counting the folder's servers as processes by their command line
(`resources.spark.record.server_processes`), whatever the record says: after the kill, one
(recorded, starting); after the recovering `sync`, one (the recorded one, adopted or new); after
`deltaport spark stop`, none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.fault_kills import KillRow, KillStory, _sync, case_folder, compare_with_truth

SPARK_START_CASES: dict[str, str] = {"kill-while-spark-server-starts": "spark.server_launched~1000"}


def _servers(state_dir: Path) -> tuple[list[int], int | None]:
    """The folder's server processes and the JVM its record names (None: no record)."""
    from resources.spark.record import STATE_FILE, read_state, server_processes

    record = read_state(state_dir / STATE_FILE)
    return server_processes(state_dir), (record.pid if record is not None else None)


def _unless(row: KillRow, problem: str, sync: subprocess.CompletedProcess, code: int) -> bool:
    """Whether `sync` exited with `code`; if not, `problem` goes to the row with its output."""
    if sync.returncode != code:
        row.problems.append(f"{problem} (exit {sync.returncode}): {(sync.stdout + sync.stderr)[-1500:]}")
    return sync.returncode == code


def run_spark_start_case(bootstrap: str, story: KillStory, case: str, work: Path, *, timeout: float = 600) -> KillRow:
    from resources.failpoints import ENV as FAILPOINTS
    from resources.spark.record import read_state, server_processes
    from resources.spark.session import close_sessions

    spec = SPARK_START_CASES[case]
    row = KillRow(case, spec)
    folder, catalog, env = case_folder(work, case, bootstrap, story)
    state_dir, config = folder / "state", folder / "deltaport.yaml"
    try:
        row.killed = _unless(row, f"the first sync did not die at {spec}",
                             _sync(folder, {**env, FAILPOINTS: spec}, timeout), -signal.SIGKILL)
        servers, recorded = _servers(state_dir)
        row.left_by_kill = {"servers_after_kill": len(servers), "unrecorded_after_kill": len(set(servers) - {recorded})}
        began = time.perf_counter()
        second = _sync(folder, env, timeout)
        row.recover_seconds = round(time.perf_counter() - began, 2)
        row.recovered = _unless(row, "the recovering sync failed", second, 0)
        servers, recorded = _servers(state_dir)
        unrecorded = sorted(set(servers) - {recorded})
        row.left_by_kill |= {"servers_after_recovery": len(servers), "unrecorded_after_recovery": len(unrecorded)}
        if len(servers) != 1 or unrecorded:
            row.problems.append(f"after the recovering sync the folder runs {len(servers)} Spark servers "
                                f"(pids {servers}; unrecorded {unrecorded}), not one recorded server")
        record = read_state(state_dir / "spark.json")
        if row.recovered and record is not None:
            compare_with_truth(row, record.url, catalog, folder / "lake", story.scenario)
            close_sessions(record.url)
    finally:
        subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", "stop", "-c", str(config)],
                       cwd=folder, env=env, capture_output=True, timeout=120)
        deadline = time.monotonic() + 60
        while server_processes(state_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = server_processes(state_dir)
        row.left_by_kill["servers_after_stop"] = len(left)
        if left:
            row.problems.append(f"`deltaport spark stop` left {len(left)} Spark servers of the folder running: {left}")
        for pid in left:  # not to leak them into the next cases
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
    row.judge()
    return row

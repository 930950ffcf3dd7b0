"""Faults in figures (issue 11), restarts: the embedded Spark server SIGKILLed in the middle of a
`deltaport sync` run; that run fails loudly, and the next `sync` starts a new server and converges.

The story and the checks are the kill cases' (bench/fault_kills.py). The case's `sync` uses the
embedded engine, as `make demo` does (no `spark.remote`: the server is started on demand in the
case's state folder). Its first run pauses itself at a failpoint (``=pause``: SIGSTOP); the
suite kills the server's process group, then lets the run go on (SIGCONT). Checked: the first
`sync` exits non-zero within a bound (the embedded engine's short retries, not pyspark's ten
minutes) with an error that names the lost server; the second succeeds (its wall time, new
server start included, is the time to recover), and the lake equals the truth as in the kills.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.fault_kills import DM, KillRow, KillStory, compare_with_truth

# case -> the failpoint where the run pauses while the server is killed
RESTARTS: dict[str, str] = {
    "spark-server-killed-in-snapshot": "snapshot.merge@2=pause",
    "spark-server-killed-in-increment": "increment.write=pause",
}


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("T")
    except (OSError, IndexError):
        return False


def run_restart_case(bootstrap: str, story: KillStory, case: str, spec: str, work: Path, *,
                     timeout: float = 600, fail_within: float = 120) -> KillRow:
    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.spark.session import close_sessions

    row = KillRow(case, spec)
    folder = work / case
    folder.mkdir(parents=True)
    catalog = case.replace("-", "_")
    config = folder / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "datamarts": [{"name": DM, "signal_topic": story.topics[SIGNAL], "backup_topic": story.topics[BACKUP]}],
        "kafka": {"bootstrap_servers": bootstrap},
        "lake": {"catalog": catalog, "warehouse": str(folder / "lake")},
        "state_dir": str(folder / "state"),
        "sensor": {"max_messages_per_tick": 5000, "max_deltas_per_run": 10},
    }))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "DELTAPORT_FAILPOINTS", "DAGSTER_HOME")}
    command = [sys.executable, "-m", "platform_assets.cli", "sync", "-c", str(config)]
    first = subprocess.Popen(command, cwd=folder, env={**env, "DELTAPORT_FAILPOINTS": spec},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while not _stopped(first.pid) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not _stopped(first.pid):
        first.kill()
        row.problems.append(f"the first sync never reached {spec}: {(first.communicate()[0] or '')[-1500:]}")
        return row
    server = json.loads((folder / "state" / "spark.json").read_text())
    os.killpg(server["pid"], signal.SIGKILL)
    row.killed = True
    killed_at = time.monotonic()
    os.kill(first.pid, signal.SIGCONT)
    output, _ = first.communicate(timeout=timeout)
    failed_after = time.monotonic() - killed_at
    row.left_by_kill = {"first_sync_exit": first.returncode, "failed_after_seconds": round(failed_after, 1),
                        "error": next((line for line in output.splitlines() if "FAILED" in line), "")[:400]}
    if first.returncode == 0 or failed_after > fail_within:
        row.problems.append(f"the run whose server died did not fail within {fail_within:.0f} s "
                            f"(exit {first.returncode} after {failed_after:.0f} s): {output[-1500:]}")
    began = time.perf_counter()
    second = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    row.recover_seconds = round(time.perf_counter() - began, 2)
    row.recovered = second.returncode == 0
    if not row.recovered:
        row.problems.append(f"the recovering sync failed (exit {second.returncode}): "
                            f"{(second.stdout + second.stderr)[-1500:]}")
    url = json.loads((folder / "state" / "spark.json").read_text())["url"] if row.recovered else None
    try:
        if url:
            compare_with_truth(row, url, catalog, folder / "lake", story.scenario)
    finally:
        if url:
            close_sessions(url)
        subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", "stop", "-c", str(config)],
                       cwd=folder, env=env, capture_output=True, timeout=120)
    row.judge()
    return row

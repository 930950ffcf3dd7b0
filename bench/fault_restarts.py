"""Faults in figures (issue 11), restarts: the embedded Spark server SIGKILLed, or the Kafka broker
restarted, in the middle of a `deltaport sync`; the run goes on or fails loudly, and the next
`sync` converges.

The story and the checks are the kill cases' (bench/fault_kills.py). Each case has an engine and
a lake of its own: the embedded Spark server (no `spark.remote`, started on demand in the case's
state folder, as `make demo` runs), and for the broker cases a broker of its own that can be
restarted on the same address with its data. The first `sync` pauses itself at a failpoint
(``=pause``: SIGSTOP); the suite breaks the part, then lets the sync go on (SIGCONT). Checked:
the first `sync` ends within a bound (the embedded engine's short retries, not pyspark's ten
minutes), either landing the story or failing with an error that names the cause; the second
succeeds (its wall time, a new server start included, is the time to recover), and the lake
equals the truth as in the kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.fault_kills import KillRow, KillStory, case_folder, compare_with_truth, publish_story


def _kill_spark_server(folder: Path) -> None:
    server = json.loads((folder / "state" / "spark.json").read_text())
    os.killpg(os.getpgid(server["pid"]), signal.SIGKILL)  # the JVM, its keeper and its Python workers


# case -> (the failpoint where the sync pauses, the part broken then: the Spark server or the broker)
RESTARTS: dict[str, tuple[str, str]] = {
    "spark-server-killed-in-snapshot": ("snapshot.merge@2=pause", "spark"),
    "spark-server-killed-in-increment": ("increment.write=pause", "spark"),
    "broker-restarted-in-ingest-tick": ("ingest.read@10=pause", "broker"),
    "broker-restarted-in-increment-read": ("increment.write=pause", "broker"),
}


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("T")
    except (OSError, IndexError):
        return False


def run_restart_case(bootstrap: str, story: KillStory | None, case: str, work: Path, *, seed: int = 7,
                     timeout: float = 600, fail_within: float = 120) -> KillRow:
    """`bootstrap`/`story`: the shared broker and story, for the Spark cases; a broker case starts
    its own broker and publishes the story there (it is restarted under the run)."""
    spec, part = RESTARTS[case]
    if part == "spark":
        return _run(bootstrap, story, case, spec, work, _kill_spark_server, timeout, fail_within)
    from resources.kafka.broker import EmbeddedKafka

    with EmbeddedKafka(work_dir=work / f"{case}-broker") as broker:
        own = publish_story(broker.bootstrap_servers, seed)
        return _run(broker.bootstrap_servers, own, case, spec, work,
                    lambda _: broker.restart(crash=True, down_seconds=3.0), timeout, fail_within)


def _run(bootstrap: str, story: KillStory, case: str, spec: str, work: Path, breaker: Callable[[Path], None],
         timeout: float, fail_within: float, *, remote: str | None = None,
         configure: Callable[[Path, dict], dict] | None = None) -> KillRow:
    """The case: `sync` paused at `spec`, `breaker(folder)`, resumed; then a second `sync`.
    `remote`: a shared engine (else the embedded one of the case's folder, started on demand and
    stopped after); `configure(folder, env)`: changes the case's deltaport.yaml and returns the
    environment its syncs run with (say, a state store and Dagster instance on PostgreSQL)."""
    from resources.spark.session import close_sessions

    row = KillRow(case, spec)
    folder, catalog, env = case_folder(work, case, bootstrap, story, remote)
    if configure is not None:
        env = configure(folder, env)
    config = folder / "deltaport.yaml"
    command = [sys.executable, "-m", "platform_assets.cli", "sync", "-c", str(config)]
    try:
        first = subprocess.Popen(command, cwd=folder, env={**env, "DELTAPORT_FAILPOINTS": spec},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while not _stopped(first.pid) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _stopped(first.pid):
            first.kill()
            row.problems.append(f"the first sync never reached {spec}: {(first.communicate()[0] or '')[-1500:]}")
            return row
        breaker(folder)
        row.killed = True
        broken_at = time.monotonic()
        os.kill(first.pid, signal.SIGCONT)
        output, _ = first.communicate(timeout=timeout)
        ended_after = time.monotonic() - broken_at
        lines = output.splitlines()
        failed = [line for line in lines if ": FAILED: " in line] or [line for line in lines if "error" in line.lower()]
        row.left_by_kill = {"first_sync_exit": first.returncode, "ended_after_seconds": round(ended_after, 1),
                            "first_sync_said": (failed[0] if failed else output.strip().splitlines()[-1:])}
        if ended_after > fail_within:
            row.problems.append(f"the sync whose {case.split('-')[0]} broke took {ended_after:.0f} s to end "
                                f"(exit {first.returncode}): {output[-1500:]}")
        began = time.perf_counter()
        second = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
        row.recover_seconds = round(time.perf_counter() - began, 2)
        row.recovered = second.returncode == 0
        if not row.recovered:
            row.problems.append(f"the recovering sync failed (exit {second.returncode}): "
                                f"{(second.stdout + second.stderr)[-1500:]}")
        if remote is not None:
            if row.recovered:
                compare_with_truth(row, remote, catalog, folder / "lake", story.scenario)
            row.judge()
            return row
        url = json.loads((folder / "state" / "spark.json").read_text())["url"] if row.recovered else None
        if url:
            compare_with_truth(row, url, catalog, folder / "lake", story.scenario)
            close_sessions(url)
    finally:
        with contextlib.suppress(Exception):
            subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", "stop", "-c", str(config)],
                           cwd=folder, env=env, capture_output=True, timeout=120)
    row.judge()
    return row

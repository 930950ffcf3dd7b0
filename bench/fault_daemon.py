"""Faults in figures (issue 11), under the Dagster daemon: a run worker killed in the middle of a
run, and the daemon itself killed in the middle of a sensor tick; the platform converges with no
hand on it.

The story and the checks are the kill cases' (bench/fault_kills.py). Each case has a folder of its
own as a deployment has: deltaport.yaml, a workspace, and a Dagster instance (SQLite) whose
dagster.yaml is the project's own, so its run retries are what is tested. `dagster-daemon run`
(sensors every second, runs launched as processes of their own by its code server) lands the
story while ``DELTAPORT_FAILPOINTS`` breaks it once (``DELTAPORT_FAILPOINTS_ONCE``: the first
process to reach the point, not the retry after it):
- run-worker-killed-under-daemon: the run worker is SIGKILLed after a snapshot MERGE's commit,
  before its tag (as the OOM killer ends it). The code server reports the run failed (its process
  died), the daemon's run retries launch it again, and the retry lands the rest.
- daemon-killed-mid-tick: the sensor's code server stops itself in the middle of reading the
  signal topic (``=pause``), and the daemon is SIGKILLed with its code server. A new daemon
  (no failpoints) picks up the sensor from its last cursor and lands everything.
- daemon-killed-mid-run: the run worker stops itself in its snapshot step, and the daemon's whole
  process group (daemon, code server, run worker) is SIGKILLed, as when its host restarts. No
  code server is left to report the run; a new daemon's run monitoring finds its worker gone
  (platform_assets/run_launcher.py), fails it, and the run retries land it.
Checked: every delta lands with no hand (no backfill, no `sync`); the lake equals the truth at
every delta, nothing applied twice, every delta tagged; the runs it took (failed, retried) and
the time from the break to the last delta landed (time to recover).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from dagster._core.storage import tags

from bench.fault_kills import DM, KillRow, KillStory, case_folder, compare_with_truth
from bench.fault_restarts import _stopped
from platform_assets.deltas.requests import RETRY_OF_TAG

ROOT = Path(__file__).resolve().parents[1]

# case -> the failpoint spec armed in the daemon's processes (its code server, its run workers)
DAEMON_CASES: dict[str, str] = {
    "run-worker-killed-under-daemon": "snapshot.committed@2",
    "daemon-killed-mid-tick": "ingest.read@10=pause",
    # Paused where the step's main thread has stored its first materializations and waits on
    # the snapshot: at `snapshot.merge@2` (a MERGE thread's point) the main thread could be
    # stopped inside a SQLite write, holding the instance's lock until the kill, while the
    # daemon's other threads waited on it: a harness artifact (a killed process frees its locks
    # at once), and one candidate for the retry that never came (docs/operating.md, "Open").
    "daemon-killed-mid-run": "step.phase1_reported=pause",
}


def _deployment(folder: Path, env: dict, *, monitoring: dict | None = None, sensor: dict | None = None) -> dict:
    """The case folder as a deployment: workspace.yaml and a Dagster home with the project's
    dagster.yaml (SQLite storage in the home). `monitoring`: ``run_monitoring`` settings over the
    project's (its poll and slot-freeing waits, which a test may shorten: the same path, sooner);
    `sensor`: deltaport.yaml's sensor settings over the case's. Returns the daemon's environment."""
    (folder / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "platform_assets.definitions", "location_name": "deltaport"}}]}))
    import dagster as dg

    home = folder / "dagster-home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    if monitoring:
        settings = yaml.safe_load((home / "dagster.yaml").read_text())
        settings["run_monitoring"] = {**settings["run_monitoring"], **monitoring}
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    # Create the instance's SQLite storage now, as a deployment's first start (or `dagster instance
    # migrate`) does: the daemon and the harness opening a new home at the same moment race in
    # Dagster's schema stamping ("alembic_version has more than one head"), and the daemon dies.
    with dg.DagsterInstance.from_config(str(home)):
        pass
    config = folder / "deltaport.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["sensor"] = {**raw.get("sensor", {}), "interval_seconds": 1, **(sensor or {})}
    config.write_text(yaml.safe_dump(raw))
    return {**env, "DAGSTER_HOME": str(home), "DELTAPORT_CONFIG": str(config)}


def _daemon(folder: Path, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                                 str(folder / "workspace.yaml")], cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


class Daemon:
    """`dagster-daemon run` on a deployment folder; `restart` kills its whole process group (the
    daemon, its code server, the run workers it launched: a host restart) and starts a new one."""

    def __init__(self, folder: Path, env: dict, log: Path):
        self.folder, self.log = folder, log
        self.proc = _daemon(folder, env, log)

    def restart(self, env: dict) -> None:
        _kill_group(self.proc)
        self.proc = _daemon(self.folder, env, self.log)

    def stop(self) -> None:
        _kill_group(self.proc)


def watch(daemon: Daemon, *, landed, deadline: float, every: float, on_tick=lambda: None,
          not_landed=lambda: "not landed") -> str | None:
    """Poll until `landed()`: None. Each round first calls `on_tick()` (where a case breaks
    something). A problem string when the daemon exits or the monotonic `deadline` passes
    (`not_landed()` says what was missing)."""
    while True:
        on_tick()
        if landed():
            return None
        if daemon.proc.poll() is not None:
            return f"the daemon exited ({daemon.proc.returncode}): {_tail(daemon.log)}"
        if time.monotonic() > deadline:
            return not_landed()
        time.sleep(every)


def run_daemon_case(bootstrap: str, remote: str, story: KillStory, case: str, work: Path,
                    *, timeout: float = 600, monitoring: dict | None = None, retry_missed: bool = False) -> KillRow:
    """`retry_missed`: Dagster's retry consumer misses the failure (as in the race in
    docs/operating.md): it reads the event log once at the daemon's start and then sleeps, so the
    sensor's own request (`sensor.retry_after_seconds`, here 3 s) is the only retry."""
    import dagster as dg

    from platform_assets.deltas.partitions import partition_key

    spec = DAEMON_CASES[case]
    row = KillRow(case, spec)
    folder, catalog, env = case_folder(work, case, bootstrap, story, remote)
    env = _deployment(folder, env, monitoring=monitoring, sensor={"retry_after_seconds": 3} if retry_missed else None)
    if retry_missed:
        env["DAGSTER_EVENT_LOG_CONSUMER_DAEMON_INTERVAL_SECONDS"] = "86400"
    fired = folder / "failpoint.fired"
    log = folder / "daemon.log"
    armed = {**env, "DELTAPORT_FAILPOINTS": spec, "DELTAPORT_FAILPOINTS_ONCE": str(fired)}
    want = {partition_key(n) for n in story.scenario.truth[DM]}
    daemon = Daemon(folder, armed, log)
    broke_at: list[float] = []

    def break_once() -> None:
        if not fired.exists() or broke_at:
            return
        # The failpoint creates the file, then writes its pid: read between the two, it is empty
        # (pid 0 would be `kill(0)`: this process's own group). Try again on the next round.
        text = fired.read_text().strip()
        if not text:
            return
        pid = int(text)
        if spec.endswith("=pause"):
            while not _stopped(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            daemon.restart(env)  # the daemon and its code server killed mid-tick; the new one unarmed
            with _quiet():
                os.kill(pid, signal.SIGKILL)
        broke_at.append(time.monotonic())
        row.killed = True

    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            deadline = time.monotonic() + timeout

            def done() -> set[str]:
                return set(instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"])))

            problem = watch(daemon, landed=lambda: bool(broke_at) and done() >= want, deadline=deadline, every=0.5,
                            on_tick=break_once,
                            not_landed=lambda: f"landed {sorted(done())} of {sorted(want)} within {timeout:.0f} s "
                                               f"(failpoint fired: {fired.exists()}, broken "
                                               f"{_since(broke_at)}); runs: {_runs(instance)}; the daemon's log, "
                                               f"its polls left out:\n{_tail(log, quiet=True)}")
            if problem:
                row.problems.append(problem)
            else:
                row.recover_seconds = round(time.monotonic() - broke_at[0], 2)
                row.recovered = True
                runs_finished(instance, 60)  # the last run's own end (its materializations come first)
            runs = instance.get_runs()
            row.left_by_kill = {
                "runs": len(runs),
                "failed_runs": sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs),
                "retries": sum(_is_retry(r) for r in runs),
                "sensor_retries": sum(RETRY_OF_TAG in r.tags for r in runs),
                "unfinished_runs": sum(not r.is_finished for r in runs),
                "why_failed": [_why(instance, r.run_id) for r in runs if r.status == dg.DagsterRunStatus.FAILURE],
            }
    finally:
        daemon.stop()
    if not row.killed:
        row.problems.append(f"the failpoint {spec} never fired")
    compare_with_truth(row, remote, catalog, folder / "lake", story.scenario)
    row.judge()
    return row


def runs_finished(instance, within: float) -> bool:
    """Wait up to `within` seconds until every run of the instance has finished."""
    deadline = time.monotonic() + within
    while any(not r.is_finished for r in instance.get_runs()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _why(instance, run_id: str) -> str:
    """Who failed the run and why: the first engine event or failure that says so."""
    for entry in instance.all_logs(run_id):
        text = entry.message or ""
        if "worker" in text or "terminated by signal" in text or "Exceeded maximum runtime" in text:
            return text[:200]
    return ""


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return kind is ProcessLookupError


# Lines every daemon loop writes every few seconds: they fill a tail and say nothing of a hang.
_POLLS = ("Checking for new runs", "No new runs", "Not checking", "Collected ", "Checking run ",
          "skipped: no new", "Priority sorting")


def _tail(path: Path, chars: int = 3000, *, quiet: bool = False) -> str:
    """The end of the daemon's log; `quiet`: its polling lines left out, so the tail reaches back
    to the last thing that happened."""
    if not path.exists():
        return ""
    text = path.read_text(errors="replace")
    if quiet:
        text = "\n".join(line for line in text.splitlines() if not any(p in line for p in _POLLS))
    return text[-chars:]


def _since(broke_at: list[float]) -> str:
    return f"{time.monotonic() - broke_at[0]:.0f} s ago" if broke_at else "not yet"


def _runs(instance) -> list[str]:
    """Each run of the instance: its status, whether it is a retry, and its last event (what it was
    doing when the case gave up)."""
    out = []
    for run in instance.get_runs():
        logs = instance.all_logs(run.run_id)
        last = (logs[-1].message or str(logs[-1].dagster_event_type))[:160] if logs else "no event"
        said = {k: v for k, v in run.tags.items() if k in _RETRY_TAGS}
        out.append(f"{run.run_id[:8]} {run.status.value}{' (retry)' if _is_retry(run) else ''} "
                   f"{said}: {last}")
    # Where the daemon's run retries read the event log from: EventLogConsumerDaemon's cursors,
    # under Dagster's own keys (a rebuilt key once read "-RUN_FAILURE" for "-PIPELINE_FAILURE").
    from dagster._daemon.auto_run_reexecution.event_log_consumer import DAGSTER_EVENT_TYPES, _create_cursor_key

    cursors = instance.daemon_cursor_storage.get_cursor_values({_create_cursor_key(t) for t in DAGSTER_EVENT_TYPES})
    return [*out, f"retry cursors {cursors}, newest event id {instance.event_log_storage.get_maximum_record_id()}"]


# A failed run's tags that say whether and why it is (not) retried.
_RETRY_TAGS = (tags.WILL_RETRY_TAG, tags.RUN_FAILURE_REASON_TAG, tags.AUTO_RETRY_RUN_ID_TAG, tags.RETRY_NUMBER_TAG,
               tags.MAX_RETRIES_TAG, RETRY_OF_TAG)


def _is_retry(run) -> bool:
    """A retry of a failed run: Dagster's (a re-execution), or the sensor's when Dagster's never
    came (platform_assets/prostore/sensors.py, `awaited_retry`)."""
    return tags.PARENT_RUN_ID_TAG in run.tags or RETRY_OF_TAG in run.tags

"""Dagster's default run launcher, able to tell run monitoring whether a run's worker still lives.

What flows through: a STARTED run (from the daemon's run monitoring) goes in; out comes the state of
its worker process: RUNNING, or FAILED when the process is gone (SIGKILL, the OOM killer, the
daemon's host restarted with its code server and runs). Dagster's `DefaultRunLauncher` cannot say,
so such a run stays STARTED for ever and holds its datamart (one run at a time) until someone
cancels it by hand. With this launcher, run monitoring (`dagster.yaml`) fails it within a poll,
frees its pool slot, and run retries launch it again.

Guarantees: a worker is reported dead only when this host can see that it is: its code server was
local (a socket or a loopback address), and the process that started the run (its RUN_START
event's pid) no longer exists, is a zombie, or is another process that started after the run did
(the pid was reused). Anything it cannot tell (a remote code server, no RUN_START yet, no /proc)
is RUNNING, and Dagster's max runtime (if set) is the backstop. Launching and terminating runs
are the default launcher's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG

_LOCAL_HOSTS = {None, "", "localhost", "127.0.0.1", "::1"}


class LocalProcessRunLauncher(dg.DefaultRunLauncher):
    """`DefaultRunLauncher` + `check_run_worker_health` for workers on this host."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        grpc = json.loads(run.tags.get(GRPC_INFO_TAG) or "{}")
        if grpc.get("host") not in _LOCAL_HOSTS:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "its code server is on another host: cannot tell")
        pid, alive = run_process_alive(self._instance, run.run_id)
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no RUN_START yet")
        if alive is None or alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone: killed, or its host "
                                                         "or code server restarted")


def run_process_alive(instance: dg.DagsterInstance, run_id: str) -> tuple[int | None, bool | None]:
    """(pid, alive) of the process that started the run (its RUN_START event), seen from this
    host: pid None before the run started; alive None when this host cannot tell."""
    starts = instance.all_logs(run_id, of_type=DagsterEventType.RUN_START)
    event = starts[-1].dagster_event if starts else None
    if event is None or not event.pid:
        return None, None
    return event.pid, worker_alive(event.pid, starts[-1].timestamp)


def worker_alive(pid: int, run_started: float, proc: Path = Path("/proc")) -> bool | None:
    """Whether process `pid`, which started a run at `run_started` (epoch seconds), still runs it;
    None when this host cannot tell (no /proc)."""
    if not (proc / "stat").exists():
        return None
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited, not yet reaped by its parent
        return False
    boot = next(float(line.split()[1]) for line in (proc / "stat").read_text().splitlines() if line.startswith("btime"))
    process_started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return process_started <= run_started + 2.0  # started after the run did: the pid was reused

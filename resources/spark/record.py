"""The record of an embedded Spark Connect server (``<state_dir>/spark.json``) and the processes it
names: shared by the starter (`server.py`) and the server's keeper (`keeper.py`).

What flows through: a state folder goes in; out come its server's record (`ServerState`), the
pids of every server JVM whose command line names the folder (recorded or not), and the folder's
holds (``spark-holds/<pid>``: a process that needs the server for as long as it lives).

What this module guarantees:

* A record is replaced atomically (a temporary file per writing process, then a rename): a
  reader never sees half a file, two writers never write into one temporary file, and a write
  into a deleted folder fails (`OSError`) instead of creating it again.
* Every server deltaport starts carries ``spark.deltaport.stateDir=<state_dir>`` on its command
  line (servers of older versions: ``spark.local.dir=<state_dir>/local``), so `server_processes`
  finds a folder's servers from ``/proc`` alone, whatever any record says.
* `kill_group` ends a server's whole process group (its keeper, the JVM, the JVM's Python
  workers): SIGTERM, then SIGKILL after a grace period.

Nothing here imports Dagster or pyspark.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["CONNECT_SERVER_CLASS", "STATE_DIR_CONF", "ServerState", "alive", "hold", "held", "kill_group",
           "read_state", "server_processes", "state_lock", "write_state"]

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE, LOCK_FILE, LOG_FILE, HOLDS_DIR = "spark.json", "spark.lock", "spark-server.log", "spark-holds"
LOCAL_DIR = "local"  # the server's scratch (spark.local.dir), unless its settings name another
STATE_DIR_CONF = "spark.deltaport.stateDir"  # a setting Spark ignores: it names the server's folder
_LAUNCHER = "org.apache.spark.launcher.Main"  # spark-class's helper JVM that only builds the command


@dataclass(frozen=True)
class ServerState:
    """What `spark.json` records of a server: written by its starter when the keeper is spawned
    (`ready` false, `pid` 0), completed by the keeper (the JVM's `pid`, then `ready`)."""

    url: str
    pid: int  # the JVM (it listens on `port`); 0 until the keeper launched it
    port: int
    log: str
    settings_digest: str
    started_at: float
    keeper: int = 0  # leads the server's process group; 0 in records of servers without a keeper
    ready: bool = True  # false while starting
    idle_timeout: float = 0.0  # seconds without a client before it stops itself; 0: never

    @property
    def identity(self) -> str:
        """Changes whenever a new server process takes the address: sessions of an older one
        are dead and must be created again."""
        return f"{self.pid}:{self.started_at}"

    @property
    def leader(self) -> int:
        """The process whose group is the whole server (what is stopped)."""
        return self.keeper or self.pid


def read_state(path: Path) -> ServerState | None:
    try:
        return ServerState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_state(path: Path, state: ServerState) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(state)))
    tmp.replace(path)


@contextlib.contextmanager
def state_lock(state_dir: Path, *, create: bool = True) -> Iterator[None]:
    """The folder's lock, held by whoever starts or stops its server. `create=False`: raise
    `OSError` when the folder is gone rather than make it again."""
    if create:
        state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not reaped by its parent) is dead
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def kill_group(leader: int, *, grace: float) -> None:
    """SIGTERM the process group `leader` leads, wait up to `grace` s for the leader, SIGKILL the
    group. A leader that is this process's child is reaped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(leader) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(leader, os.WNOHANG)
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(leader, os.WNOHANG)


def server_processes(state_dir: Path) -> list[int]:
    """Pids of the Spark Connect servers of `state_dir` running on this host, recorded or not
    (spark-submit's scripts exec the JVM: one server is one pid from launch on)."""
    marks = {f"{STATE_DIR_CONF}={state_dir}", f"spark.local.dir={state_dir / LOCAL_DIR}"}
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if CONNECT_SERVER_CLASS in args and _LAUNCHER not in args and marks.intersection(args):
                found.append(int(entry.name))
    return sorted(found)


@contextlib.contextmanager
def hold(state_dir: Path) -> Iterator[None]:
    """While inside, the server of `state_dir` does not stop for idleness (a file naming this
    process; one left by a process that died holds nothing)."""
    holds = state_dir / HOLDS_DIR
    holds.mkdir(parents=True, exist_ok=True)
    mine = holds / str(os.getpid())
    mine.touch()
    try:
        yield
    finally:
        mine.unlink(missing_ok=True)


def held(state_dir: Path) -> bool:
    """Whether a living process holds the server of `state_dir` (stale holds are removed)."""
    try:
        entries = list(os.scandir(state_dir / HOLDS_DIR))
    except OSError:
        return False
    holding = False
    for entry in entries:
        if entry.name.isdigit() and alive(int(entry.name)):
            holding = True
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    return holding

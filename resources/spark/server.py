"""The embedded Spark engine: one long-lived Spark Connect server on loopback, shared by every
process of a deployment (Dagster run workers and steps, the sensor daemon, `deltaport sync`,
`deltaport read`, tests and benchmarks).

What flows through: a state folder and the server's settings (`server_conf`: master, Iceberg
jars and SQL extensions, the catalog, small-machine defaults) go in; an ``sc://127.0.0.1:<port>``
address comes out, recorded in ``<state_dir>/spark.json`` (pid, port, log, settings digest).

What this module guarantees:

* The server is Spark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``,
  launched by the ``spark-submit`` that pip's pyspark ships), bound to 127.0.0.1 on a free port.
  Its Python workers run this interpreter (the project's venv), so the Kafka read tasks
  (a Python data source) find deltaport's codecs. Its output goes to ``<state_dir>/spark-server.log``.
* `ensure()` is safe to call from many processes at once: a file lock serialises the check
  and the start, so one server is started and every caller gets its address. A server whose
  process died, or whose port stopped answering, is started again: a crash or a
  `deltaport spark stop` is never fatal for later runs.
* Its port is picked below the kernel's ephemeral range, and it is up only when *its* process
  listens there (`resources.net.serves`), never because something answered at that port; a
  port taken by another process before the server bound it is replaced by a new one.
* The server outlives the process that started it (its own session, no parent-death signal):
  a run worker starts it, the next run reuses it warm. `stop()` ends it (SIGTERM, SIGKILL
  after a grace period) and removes the state file.
* `start()` returns only when the server listens, or raises `SparkServerError` with the tail of
  the server's log (early exit, start timeout).
* Its scratch space (``spark.local.dir``: copies of the jars, shuffle and spill files) is
  ``<state_dir>/local`` unless the settings name another, and is emptied before a new server
  starts there: a killed server's leftovers do not pile up in /tmp (~50 MB each).

Nothing here imports Dagster or starts a Spark client.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from resources.errors import DeltaportError
from resources.net import free_port, serves

__all__ = ["CONNECT_SERVER_CLASS", "LocalSparkServer", "ServerState", "SparkServerError", "spark_submit"]

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE, LOCK_FILE, LOG_FILE = "spark.json", "spark.lock", "spark-server.log"
LOCAL_DIR = "local"  # the server's scratch (spark.local.dir), unless its settings name another
_log = logging.getLogger(__name__)


class SparkServerError(DeltaportError):
    """The embedded Spark Connect server could not be started, reached or stopped."""


@dataclass(frozen=True)
class ServerState:
    """What `spark.json` records of a running server."""

    url: str
    pid: int
    port: int
    log: str
    settings_digest: str
    started_at: float

    @property
    def identity(self) -> str:
        """Changes whenever a new server process takes the address: sessions of an older one
        are dead and must be created again."""
        return f"{self.pid}:{self.started_at}"


def spark_submit() -> Path:
    """The ``spark-submit`` script of the installed pyspark."""
    import pyspark

    script = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not script.is_file():
        raise SparkServerError(f"pyspark at {script.parent.parent} ships no bin/spark-submit; "
                               "install the full pyspark package (not pyspark-client)")
    return script


def engine_env() -> dict[str, str]:
    """The environment of a Spark JVM deltaport starts (the Connect server; a test cluster's master
    and workers): this process's, without the Spark Connect *client* settings. With SPARK_REMOTE
    set, Spark's launcher builds "remote" classpaths (spark-sql and spark-connect jars moved to the
    end), and executors launched so fail to deserialize tasks (ClassCastException: SerializedLambda
    -> scala.Function3). Python workers run this interpreter (the project's venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = env.get("PYSPARK_PYTHON") or sys.executable
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not reaped by its parent) is dead
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


# What Spark's log says when the gRPC port was taken between our pick and its bind.
_BIND_FAILURE = "Failed to bind to address"
_PORT_ATTEMPTS = 3


class _PortLost(Exception):
    """The server exited because another process took its port first."""


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalSparkServer:
    """A Spark Connect server on loopback whose address lives in ``<state_dir>/spark.json``.

    `settings`: every Spark setting the server starts with (see `session.server_conf`); the
    ``spark.master`` among them is the server's master (``local[2]``, or a cluster's master).
    A server already running with other settings is reused (a warning says so): stop it to
    apply new ones.
    """

    def __init__(self, state_dir: str | Path, settings: Mapping[str, str], *, start_timeout: float = 180.0):
        self.state_dir = Path(state_dir).absolute()
        self.settings = {str(k): str(v) for k, v in settings.items()}
        self.start_timeout = start_timeout

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.state_dir / LOG_FILE

    def settings_digest(self) -> str:
        text = json.dumps(self.settings, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ---------------------------------------------------------------- state

    def _read_state(self) -> ServerState | None:
        try:
            return ServerState(**json.loads(self.state_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def status(self) -> ServerState | None:
        """The running server, or None (no state file, process gone, or port not answering)."""
        state = self._read_state()
        if state is None or not _alive(state.pid) or not serves(state.pid, state.port):
            return None
        return state

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / LOCK_FILE, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # ---------------------------------------------------------------- lifecycle

    def ensure(self) -> ServerState:
        """The running server, started first if none is (or the recorded one died)."""
        state = self.status()
        if state is None:
            with self._locked():
                state = self.status()  # another process may have started it meanwhile
                if state is None:
                    state = self._start_locked()
        if state.settings_digest != self.settings_digest():
            _log.warning("the Spark server at %s runs with other settings than configured now; "
                         "`deltaport spark stop` (it restarts on demand) to apply them", state.url)
        return state

    def start(self) -> ServerState:
        """Same as `ensure()`: starting an already running server is a no-op."""
        return self.ensure()

    def _start_locked(self) -> ServerState:
        stale = self._read_state()
        if stale is not None and _alive(stale.pid):  # running but deaf: replace it
            self._kill(stale.pid, grace=10.0)
        self.state_path.unlink(missing_ok=True)
        # Scratch of a server that died without cleaning up (a SIGKILL leaves ~50 MB of jar copies
        # and any shuffle files): no server of this folder runs now, so it is nobody's.
        shutil.rmtree(self.state_dir / LOCAL_DIR, ignore_errors=True)
        began = time.monotonic()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                proc, port = self._launch_and_wait(began)
                break
            except _PortLost:
                if attempt == _PORT_ATTEMPTS:
                    raise SparkServerError(f"the Spark Connect server lost its port {_PORT_ATTEMPTS} times in a row "
                                           f"to other processes; log {self.log_path}:\n{_tail(self.log_path)}") from None
                _log.warning("the port picked for the Spark Connect server was taken before it bound it; "
                             "starting it on another port")
        state = ServerState(url=f"sc://127.0.0.1:{port}", pid=proc.pid, port=port, log=str(self.log_path),
                            settings_digest=self.settings_digest(), started_at=time.time())
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.__dict__))
        tmp.replace(self.state_path)  # readers never see half a file
        _log.info("Spark Connect server started at %s in %.1f s (pid %d)", state.url,
                  time.monotonic() - began, proc.pid)
        return state

    def _launch_and_wait(self, began: float) -> tuple[subprocess.Popen, int]:
        """Start the server on a free port; return once *its* process listens there (a port that
        merely answers may be someone else's, see `resources.net`). Raises `_PortLost` when the
        server exits because the port was taken meanwhile."""
        port = free_port()
        settings = {"spark.local.dir": str(self.state_dir / LOCAL_DIR), **self.settings,
                    "spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(port)}
        command = [str(spark_submit()), "--class", CONNECT_SERVER_CLASS, "--name", "deltaport-spark"]
        for key, value in sorted(settings.items()):
            command += ["--conf", f"{key}={value}"]
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== starting Spark Connect server on 127.0.0.1:{port} ===\n".encode())
            out.flush()
            logged_from = out.tell()
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.state_dir, env=engine_env(), start_new_session=True)
        deadline = began + self.start_timeout
        while not serves(proc.pid, port):
            if proc.poll() is not None:
                if _BIND_FAILURE in _read_from(self.log_path, logged_from):
                    raise _PortLost(port)
                raise SparkServerError(f"the Spark Connect server exited (code {proc.returncode}) while "
                                       f"starting; log {self.log_path}:\n{_tail(self.log_path)}")
            if time.monotonic() > deadline:
                self._kill(proc.pid, grace=5.0)
                raise SparkServerError(f"the Spark Connect server did not answer within {self.start_timeout:.0f} s; "
                                       f"log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.25)
        return proc, port

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the server; False when none was running."""
        with self._locked():
            state = self._read_state()
            self.state_path.unlink(missing_ok=True)
            if state is None or not _alive(state.pid):
                return False
            self._kill(state.pid, grace=timeout)
            return True

    @staticmethod
    def _kill(pid: int, *, grace: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)  # the server's own session: spark-submit and its JVM
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

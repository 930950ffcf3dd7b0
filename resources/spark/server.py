"""The embedded Spark engine: one long-lived Spark Connect server on loopback, shared by every
process of a deployment (Dagster run workers and steps, the sensor daemon, `deltaport sync`,
`deltaport read`, tests and benchmarks).

What flows through: a state folder and the server's settings (`server_conf`: master, Iceberg
jars and SQL extensions, the catalog, small-machine defaults) go in; an ``sc://127.0.0.1:<port>``
address comes out, recorded in ``<state_dir>/spark.json`` (`record.ServerState`: the JVM's and
its keeper's pids, port, log, settings digest, idle timeout).

What this module guarantees:

* The server is Spark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``,
  launched by the ``spark-submit`` that pip's pyspark ships), bound to 127.0.0.1 on a free port.
  Its Python workers run this interpreter (the project's venv), so the Kafka read tasks
  (a Python data source) find deltaport's codecs. Its output goes to ``<state_dir>/spark-server.log``.
* `ensure()` is safe to call from many processes at once: a file lock serialises the check
  and the start, so one server is started and every caller gets its address. A server whose
  process died, or whose port stopped answering, is started again: a crash or a
  `deltaport spark stop` is never fatal for later runs.
* No server outlives its record (issue 31). The JVM is launched by its keeper
  (`resources.spark.keeper`), and only after the record names the keeper; the JVM dies with
  the keeper. A starter killed while its server starts leaves a record marked starting: the next
  starter (holding the lock, so no living starter waits on that server) adopts it, or stops it
  when it does not come up. Before a new server starts, and on `stop()`, any other server of this
  folder that no record names (`record.server_processes`: found by its command line) is stopped.
* The server ends itself when its record is gone (its state folder deleted) and, with an idle
  timeout (`idle_timeout` s, `spark.idle_timeout_minutes` in deltaport.yaml), after that long
  with no client connected and no hold (`hold()`); see `resources.spark.keeper`.
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
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from resources.class_archive import ClassArchive, class_archive, classpath_identity, mentions_sharing, sharing_options
from resources.java import find_java
from resources.errors import DeltaportError
from resources.failpoints import failpoint
from resources.net import free_port, serves
from resources.spark.record import (CONNECT_SERVER_CLASS, LOCAL_DIR, LOG_FILE, STATE_DIR_CONF, STATE_FILE,
                                    ServerState, alive, hold, kill_group, read_state, server_processes, state_lock,
                                    write_state)

__all__ = ["CONNECT_SERVER_CLASS", "LocalSparkServer", "ServerState", "SparkServerError", "spark_submit"]

_alive = alive  # the name tests and older callers use
_log = logging.getLogger(__name__)
# The keeper imports this very code (its root first on its own path, not on $PYTHONPATH: that
# would reach the JVM's Python workers too).
_KEEPER = "import sys; sys.path.insert(0, sys.argv[1]); from resources.spark.keeper import main; sys.exit(main())"
_ROOT = Path(__file__).resolve().parents[2]


class SparkServerError(DeltaportError):
    """The embedded Spark Connect server could not be started, reached or stopped."""


def spark_submit() -> Path:
    """The ``spark-submit`` script of the installed pyspark."""
    import pyspark

    script = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not script.is_file():
        raise SparkServerError(f"pyspark at {script.parent.parent} ships no bin/spark-submit; "
                               "install the full pyspark package (not pyspark-client)")
    return script


def server_class_archive(settings: Mapping[str, str]) -> ClassArchive | None:
    """The class archive of a server started with `settings` (`resources.class_archive`): the
    same pyspark jars, driver classpath and JDK share one. None when the settings' own
    ``spark.driver.extraJavaOptions`` speak of class-data sharing (``-Xshare:off`` turns it off),
    or no java is found (spark-submit will say so)."""
    import pyspark

    from resources.maven import cache_root

    if mentions_sharing(settings.get("spark.driver.extraJavaOptions", "")):
        return None
    java = find_java()
    if java is None:
        return None
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    extra = [e for e in settings.get("spark.driver.extraClassPath", "").split(os.pathsep) if e]
    try:
        return class_archive("spark-connect-server", [pyspark.__version__, *classpath_identity([*extra, *jars])],
                             java=java, cache=cache_root())
    except OSError as exc:  # an unwritable cache: start without sharing
        _log.warning("the Spark Connect server starts without a class archive: %s", exc)
        return None


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
    apply new ones. `idle_timeout`: seconds without a client after which a server this object
    starts stops itself (0: never); a running server keeps the timeout it started with.
    """

    def __init__(self, state_dir: str | Path, settings: Mapping[str, str], *, start_timeout: float = 180.0,
                 idle_timeout: float = 0.0):
        self.state_dir = Path(state_dir).absolute()
        self.settings = {str(k): str(v) for k, v in settings.items()}
        self.start_timeout = start_timeout
        self.idle_timeout = idle_timeout

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
        return read_state(self.state_path)

    def status(self) -> ServerState | None:
        """The running server, or None (no state file, still starting, process gone, or port not
        answering)."""
        state = self._read_state()
        if (state is None or not state.ready or not alive(state.leader) or not state.pid
                or not serves(state.pid, state.port)):
            return None
        return state

    def starting(self) -> ServerState | None:
        """The record of a server that is starting (its keeper alive, not yet ready), or None."""
        state = self._read_state()
        return state if state is not None and not state.ready and alive(state.leader) else None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """While inside, the server does not stop for idleness (`make demo` holds it for its
        lifetime: its runs reach the server through $SPARK_REMOTE, which cannot start it again)."""
        with hold(self.state_dir):
            yield

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with state_lock(self.state_dir):
            yield

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
        began = time.monotonic()
        found = self._read_state()
        if found is not None and alive(found.leader):
            if not found.ready and found.keeper:
                # Its starter died while it started (we hold the lock: nobody else waits on it).
                _log.warning("adopting the Spark Connect server a starter left starting (keeper pid %d)", found.keeper)
                try:
                    return self._await(found.keeper, None, began)
                except SparkServerError as exc:
                    _log.warning("the adopted server did not come up, starting a new one: %s", exc)
            else:  # running but deaf: replace it
                kill_group(found.leader, grace=10.0)
        self.state_path.unlink(missing_ok=True)
        self._stop_unrecorded()
        # Scratch of a server that died without cleaning up (a SIGKILL leaves ~50 MB of jar copies
        # and any shuffle files): no server of this folder runs now, so it is nobody's.
        shutil.rmtree(self.state_dir / LOCAL_DIR, ignore_errors=True)
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                state = self._launch(began)
                break
            except _PortLost:
                if attempt == _PORT_ATTEMPTS:
                    raise SparkServerError(f"the Spark Connect server lost its port {_PORT_ATTEMPTS} times in a row "
                                           f"to other processes; log {self.log_path}:\n{_tail(self.log_path)}") from None
                _log.warning("the port picked for the Spark Connect server was taken before it bound it; "
                             "starting it on another port")
        _log.info("Spark Connect server started at %s in %.1f s (pid %d)", state.url,
                  time.monotonic() - began, state.pid)
        return state

    def _launch(self, began: float) -> ServerState:
        """Spawn a keeper for a server on a free port, record it, hand it the launch, and wait
        until the server listens. Raises `_PortLost` when the server exits because the port was
        taken meanwhile."""
        port = free_port()
        settings = {"spark.local.dir": str(self.state_dir / LOCAL_DIR), **self.settings,
                    STATE_DIR_CONF: str(self.state_dir),
                    "spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(port)}
        archive = server_class_archive(settings)
        if archive is not None:
            settings["spark.driver.extraJavaOptions"] = " ".join(
                [*sharing_options(archive), settings.get("spark.driver.extraJavaOptions", "")]).strip()
        command = [str(spark_submit()), "--class", CONNECT_SERVER_CLASS, "--name", "deltaport-spark"]
        for key, value in sorted(settings.items()):
            command += ["--conf", f"{key}={value}"]
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== starting Spark Connect server on 127.0.0.1:{port} ===\n".encode())
            out.flush()
            logged_from = out.tell()
            keeper = subprocess.Popen([sys.executable, "-c", _KEEPER, str(_ROOT)], stdin=subprocess.PIPE, stdout=out,
                                      stderr=subprocess.STDOUT, cwd=self.state_dir, env=engine_env(),
                                      start_new_session=True)
        failpoint("spark.keeper_spawned")
        # The record names the keeper before the keeper may launch anything: a SIGKILL of this
        # process from here on leaves a recorded server (or a keeper that launches nothing).
        write_state(self.state_path, ServerState(
            url=f"sc://127.0.0.1:{port}", pid=0, port=port, log=str(self.log_path),
            settings_digest=self.settings_digest(), started_at=time.time(), keeper=keeper.pid, ready=False,
            idle_timeout=self.idle_timeout))
        launch = {"state_dir": str(self.state_dir), "command": command, "port": port,
                  # The keeper's own bound only stops starts whose starter died: ours comes first.
                  "start_timeout": max(0.0, began + self.start_timeout - time.monotonic()) + 30.0,
                  "idle_timeout": self.idle_timeout, "archive": archive.to_json() if archive is not None else None}
        with contextlib.suppress(BrokenPipeError):  # a keeper that died at once: `_await` says why
            keeper.stdin.write(json.dumps(launch).encode())
        with contextlib.suppress(BrokenPipeError):
            keeper.stdin.close()
        return self._await(keeper.pid, keeper, began, logged_from)

    def _await(self, keeper_pid: int, keeper: subprocess.Popen | None, began: float,
               logged_from: int | None = None) -> ServerState:
        """Wait until the server of `keeper_pid` is ready and its JVM listens on its port.
        `keeper`: our own child (else an adopted server); `logged_from`: where its start's log
        begins (tells a lost port from other failures)."""
        deadline = began + self.start_timeout
        launched = False
        while True:
            state = self._read_state()
            mine = state is not None and state.keeper == keeper_pid
            if mine and state.ready and state.pid and serves(state.pid, state.port):
                return state
            if mine and state.pid and not launched:
                launched = True
                failpoint("spark.server_launched")
            ended = keeper.poll() is not None if keeper is not None else not alive(keeper_pid)
            if ended or not mine:
                kill_group(keeper_pid, grace=5.0)
                self._forget(keeper_pid)
                if logged_from is not None and _BIND_FAILURE in _read_from(self.log_path, logged_from):
                    raise _PortLost()
                code = f"code {keeper.returncode}" if keeper is not None else f"keeper pid {keeper_pid}"
                raise SparkServerError(f"the Spark Connect server exited ({code}) while starting; "
                                       f"log {self.log_path}:\n{_tail(self.log_path)}")
            if time.monotonic() > deadline:
                kill_group(keeper_pid, grace=5.0)
                self._forget(keeper_pid)
                raise SparkServerError(f"the Spark Connect server did not answer within {self.start_timeout:.0f} s; "
                                       f"log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.25)

    def _forget(self, keeper_pid: int) -> None:
        """Remove the record if it still names `keeper_pid`."""
        state = self._read_state()
        if state is not None and state.keeper == keeper_pid:
            self.state_path.unlink(missing_ok=True)

    def _stop_unrecorded(self, *, besides: int = 0) -> bool:
        """Stop every server of this folder that no record names (left by a starter of an older
        deltaport killed while it started, say); `besides`: a group being stopped already."""
        stopped = False
        for pid in server_processes(self.state_dir):
            try:
                group = os.getpgid(pid)
            except OSError:  # gone meanwhile
                continue
            if group in (besides, os.getpgrp()):
                continue
            _log.warning("stopping a Spark Connect server of %s that no record names (pid %d)", self.state_dir, pid)
            kill_group(group, grace=10.0)
            stopped = True
        return stopped

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the server, and any server of this folder no record names; False when none was
        running."""
        with self._locked():
            state = self._read_state()
            self.state_path.unlink(missing_ok=True)
            stopped = False
            if state is not None and alive(state.leader):
                kill_group(state.leader, grace=timeout)
                stopped = True
            return self._stop_unrecorded(besides=state.leader if state is not None else 0) or stopped

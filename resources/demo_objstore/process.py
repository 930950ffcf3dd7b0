"""One server process on a loopback port, with its log in a file: what the object store and the
REST catalog that tests (and a demo profile) start have in common.

What flows through: a command and an environment go in (the subclass says which, given the
port); a running process listening on ``127.0.0.1:<port>`` comes out.

What this module guarantees:

* `start()` returns only once *its* process listens on its port (`resources.net.serves`), or
  raises `ObjectStoreError` carrying the tail of the log (early exit, start timeout). A port
  taken by another process between the pick and the bind is replaced by a new one, up to three
  times; a restart keeps its port, so clients reach it at the same address.
* The process writes to ``<folder>/<name>.log`` only (stdout and stderr), never to the parent's
  terminal; it is in a session of its own and, on Linux, dies with the Python process that
  started it (parent-death signal); servers still running at interpreter exit are stopped.
* `stop()` is idempotent: SIGTERM, SIGKILL after `stop_timeout` seconds. `restart(crash=True)`
  is a SIGKILL and a new start on the same port (the fault cases).

Nothing here imports Dagster. Every failure raised on purpose is an `ObjectStoreError`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from resources.errors import DeltaportError
from resources.kafka.broker import _set_parent_death_signal
from resources.net import free_port, serves
from resources.spark.server import _tail

__all__ = ["LoopbackProcess", "ObjectStoreError"]

_log = logging.getLogger(__name__)
_PORT_ATTEMPTS = 3


class ObjectStoreError(DeltaportError):
    """The object store or the catalog server could not be started, reached or stopped."""


class LoopbackProcess:
    """A server process bound to 127.0.0.1; subclasses give `name`, `command(port)` and `env(port)`."""

    name = "server"

    def __init__(self, folder: str | Path, *, start_timeout: float = 60.0, stop_timeout: float = 10.0):
        self.folder = Path(folder).absolute()
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port: int | None = None
        self.started_seconds: float | None = None  # how long the last start took
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stop_at_exit = False

    # ------------------------------------------------------------ what subclasses say

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def env(self, port: int) -> Mapping[str, str] | None:
        return None  # None: this process's environment

    def prepare(self) -> None:
        """Runs once before the first launch (resolve jars, compile, make folders)."""

    # ------------------------------------------------------------ life cycle

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None and self.port is not None and serves(proc.pid, self.port)

    def start(self):
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self
            began = time.monotonic()
            self.folder.mkdir(parents=True, exist_ok=True)
            self.prepare()
            keep = self.port is not None  # a restart: same address for the clients
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                port = self.port if keep else free_port()
                if self._launch(port, began):
                    break
                if keep or attempt == _PORT_ATTEMPTS:
                    raise ObjectStoreError(f"the {self.name} exited while starting on 127.0.0.1:{port}; "
                                           f"log {self.log_path}:\n{_tail(self.log_path)}")
                _log.warning("the %s exited while starting on port %d (taken meanwhile?); trying another port",
                             self.name, port)
            self.port = port
            self.started_seconds = time.monotonic() - began
            if not self._stop_at_exit:  # a server left running at interpreter exit is stopped
                atexit.register(self.stop)
                self._stop_at_exit = True
            _log.info("%s started on 127.0.0.1:%d in %.1f s (pid %d)", self.name, port, self.started_seconds,
                      self._proc.pid)
            return self

    def _launch(self, port: int, began: float) -> bool:
        """Start the process on `port` and wait until it listens there: True; False when it exited
        first. Raises `ObjectStoreError` at the start timeout (the process is killed)."""
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== starting {self.name} on 127.0.0.1:{port} ===\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                self.command(port), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.folder, env=self.env(port), start_new_session=True,
                # The death signal follows the *thread* that forks, so only from the main thread.
                preexec_fn=_set_parent_death_signal
                if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
                else None)
        while not serves(self._proc.pid, port):
            if self._proc.poll() is not None:
                return False
            if time.monotonic() - began > self.start_timeout:
                self._kill(self._proc)
                raise ObjectStoreError(f"the {self.name} did not listen on 127.0.0.1:{port} within "
                                       f"{self.start_timeout:.0f} s; log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.05)
        return True

    def _kill(self, proc: subprocess.Popen, *, crash: bool = False) -> None:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            _log.warning("the %s (pid %d) ignored SIGTERM for %.0f s; killing it", self.name, proc.pid,
                         self.stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)

    def stop(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                self._kill(proc)

    def restart(self, *, crash: bool = True, down_seconds: float = 0.0):
        """Kill (SIGKILL with `crash`, else SIGTERM) and start again on the same port."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                self._kill(proc, crash=crash)
        time.sleep(down_seconds)
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 127.0.0.1:{self.port} pid={self.pid}>"

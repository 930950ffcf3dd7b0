"""The keeper of an embedded Spark Connect server: a small Python process that owns the server's
JVM and ends it once nothing can use or find it (issue 31).

What flows through: a starter (`server.LocalSparkServer`) spawns a keeper (this module's
`main`, in a Python process) in a session of its own, records the keeper's pid in
``<state_dir>/spark.json`` (not ready, no JVM yet), then writes the launch on the keeper's stdin
(the spark-submit command, the port, the timeouts) and closes it. The keeper launches the JVM as
its child, writes the JVM's pid into the record, then ``ready`` once the JVM listens on its
port, and watches it every 2 s (less when the idle timeout is shorter). Its decisions go to the
server's log (``[deltaport keeper <pid>] ...``).

What this module guarantees:

* No JVM without a record: the keeper launches nothing until the launch is handed over whole,
  and the starter writes the record naming the keeper before it hands the launch over. A starter
  killed before that leaves a keeper that reads a cut-off launch, launches nothing and exits; a
  starter killed after it leaves a recorded server, starting, that the next starter adopts.
* The JVM dies with its keeper (PR_SET_PDEATHSIG: SIGTERM when the keeper dies, even by
  SIGKILL); they are one process group, which is what `deltaport spark stop` ends.
* The server ends when its record is gone or names another keeper: its state folder was deleted,
  or the record was removed or replaced. Nothing could find or stop it any more.
* Idle timeout: once ready, the server stops itself after `idle_timeout` seconds (0: never)
  with no client connected (no established TCP connection on its port, `resources.net.clients`)
  and no living hold (``<state_dir>/spark-holds/<pid>``: `make demo` holds its server for its
  lifetime). It decides under the folder's lock, removes its record first, and stops the JVM
  before the lock is released: a starter waiting for the lock starts a new server after it.
* A server that does not listen within the start timeout is stopped: a starter that died does
  not leave a hung start behind.

Why a keeper process: Spark Connect (4.1) has no idle shutdown of the server; its settings end
*sessions* (``spark.connect.session.manager.defaultSessionTimeout``) and detached executions,
never the server, and a JVM-side watchdog would be a plugin jar to build and ship. A watchdog in
a client process (a run, `sync`) dies with that process, and a cron `sync` ends in minutes. The
keeper is the JVM's parent, so it sees the JVM's exit at once and its own death takes the JVM
with it; it costs a Python process (~15 MB) and a read of ``/proc/net/tcp`` every 2 s.
Idleness is counted in connections rather than Spark sessions: a pyspark Connect client keeps its
gRPC channel open while it is in use (gRPC closes a channel after 30 minutes without calls), so
a run, a `sync` or a benchmark in progress keeps the server, and a process that ended holds
none. Where ``/proc`` cannot tell, the server is never taken for idle.

Limit: a caller that found the server running (`ensure()` reads the record without the lock)
just as it stopped for idleness fails its first call; the window is the milliseconds between that
check and the caller's first connection, once per idle stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from resources.class_archive import ClassArchive, publish
from resources.net import clients, serves
from resources.spark.record import STATE_FILE, held, read_state, state_lock, write_state

__all__ = ["main"]

_POLL = 2.0  # seconds between two looks, at most
_START_POLL = 0.2  # ... while the server starts (a starter waits on its readiness)
_STOP_GRACE = 30.0  # seconds the JVM gets to shut down after SIGTERM
_PR_SET_PDEATHSIG = 1


def _say(text: str) -> None:
    print(f"[deltaport keeper {os.getpid()}] {text}", flush=True)


def _dies_with_parent(parent: int):
    """preexec_fn of the JVM: the kernel SIGTERMs it when `parent` (this keeper) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux: the keeper's stop and the record checks remain
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the keeper died before the signal was armed
            os._exit(1)
    return arm


class Keeper:
    def __init__(self, spec: dict):
        self.state_dir = Path(spec["state_dir"])
        self.path = self.state_dir / STATE_FILE
        self.command: list[str] = spec["command"]
        self.port = int(spec["port"])
        self.start_timeout = float(spec["start_timeout"])
        self.idle_timeout = float(spec["idle_timeout"])
        self.poll = min(_POLL, max(0.1, self.idle_timeout / 10)) if self.idle_timeout else _POLL
        self.asked_to_stop = False
        self.jvm: subprocess.Popen | None = None
        archive = spec.get("archive")
        self.archive = ClassArchive(Path(archive["final"]), Path(archive["part"]), archive["java"]) if archive else None

    def _mine(self):
        state = read_state(self.path)
        return state if state is not None and state.keeper == os.getpid() else None

    def _busy(self) -> bool:
        connected = clients(self.port)
        return connected is None or connected > 0 or held(self.state_dir)

    def run(self) -> int:
        state = self._mine()
        if state is None:  # the record never named this keeper (another starter took over)
            _say("no record names this keeper: nothing launched")
            return 0
        self.jvm = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, cwd=self.state_dir,
                                    preexec_fn=_dies_with_parent(os.getpid()))
        with contextlib.suppress(OSError):  # a folder deleted meanwhile: the first look stops it
            if self._mine() is not None:
                write_state(self.path, replace(state, pid=self.jvm.pid))
        _say(f"launched the Spark Connect server (pid {self.jvm.pid}, port {self.port}); idle timeout "
             + (f"{self.idle_timeout:.0f} s" if self.idle_timeout else "off"))
        reason = self._watch()
        if reason is None:  # the JVM ended by itself
            code = self.jvm.returncode
            _say(f"the Spark Connect server exited (code {code})")
            self._forget()
            self._publish_archive()
            return code if code >= 0 else 128 - code
        if self.jvm.poll() is None:
            _say(f"stopping the Spark Connect server: {reason}")
        self._stop()
        self._publish_archive()
        return 0

    def _publish_archive(self) -> None:
        """The class archive the JVM dumped at its exit, if it was asked to, for the next servers
        (`resources.class_archive`): not after a SIGKILL, which may have cut it short."""
        if self.archive is not None and publish(self.archive, killed=self.jvm.returncode == -signal.SIGKILL):
            _say(f"published the server's class archive {self.archive.final} for the next starts")

    def _watch(self) -> str | None:
        """Look until the JVM ends (None) or must be stopped (why)."""
        start_deadline = time.monotonic() + self.start_timeout
        ready, last_used = False, time.monotonic()
        while self.jvm.poll() is None:
            if self.asked_to_stop:
                return "asked to stop (SIGTERM)"
            state, now = self._mine(), time.monotonic()
            if state is None:
                return f"its record {self.path} is gone or names another server"
            if not ready:
                if serves(self.jvm.pid, self.port):
                    ready, last_used = True, now
                    with contextlib.suppress(OSError):
                        write_state(self.path, replace(state, pid=self.jvm.pid, ready=True))
                elif now > start_deadline:
                    return f"not listening on port {self.port} after {self.start_timeout:.0f} s"
            elif self._busy():
                last_used = now
            elif self.idle_timeout and now - last_used >= self.idle_timeout and self._retire(
                    f"idle for {now - last_used:.0f} s (no client connected; idle timeout {self.idle_timeout:.0f} s)"):
                return "idle"
            with contextlib.suppress(subprocess.TimeoutExpired):  # wakes as soon as the JVM exits
                self.jvm.wait(timeout=self.poll if ready else _START_POLL)
        return None

    def _retire(self, why: str) -> bool:
        """Under the folder's lock: still idle -> remove the record, stop the JVM (the lock is
        held until it is gone), True. Busy again meanwhile, or the folder gone: False."""
        try:
            with state_lock(self.state_dir, create=False):
                if self._busy():
                    return False
                self.path.unlink(missing_ok=True)  # no caller is handed this server from now on
                _say(f"stopping the Spark Connect server: {why}")
                self._stop()
        except OSError:  # the folder is gone: the next look stops the server
            return False
        return True

    def _stop(self) -> None:
        """SIGTERM the group (the JVM and its Python workers), wait for the JVM, forget it."""
        if self.jvm.poll() is None:
            self.asked_to_stop = True  # this keeper receives the SIGTERM too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgrp(), signal.SIGTERM)
            try:
                self.jvm.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                _say(f"the server did not stop within {_STOP_GRACE:.0f} s: SIGKILL")
                self.jvm.kill()
                self.jvm.wait()
        self._forget()

    def _forget(self) -> None:
        with contextlib.suppress(OSError):
            if self._mine() is not None:
                self.path.unlink()


def main() -> int:
    keeper: Keeper | None = None

    def on_sigterm(signum, frame) -> None:
        if keeper is None or keeper.jvm is None:
            raise SystemExit(0)  # nothing launched yet: nothing to stop
        keeper.asked_to_stop = True

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        spec = json.loads(sys.stdin.read())
    except ValueError:
        _say("the starter went before handing the launch over: nothing launched")
        return 0
    keeper = Keeper(spec)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main())

"""`deltaport spark start|stop|status`: the embedded Spark engine, one Spark Connect server on
loopback that every run, sensor and command of this deployment shares. `start` runs it in the
background and records its address in `<state_dir>/spark.json`; runs, `sync`, `read` and
`make dev` start it on demand anyway, so `start` only saves the first run the wait. It stops
itself after `spark.idle_timeout_minutes` (default 60) with no client connected, and when its
state folder is deleted. With `spark.remote` (or $SPARK_REMOTE) set, deltaport uses that server
and these commands say so."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from platform_assets.cli.common import add_config_option, state_dir
from platform_assets.config import load_config
from platform_assets.engine import engine_for
from resources.spark.engine import EngineSettings
from resources.spark.session import connect_address


def register(sub) -> None:
    p = sub.add_parser("spark", help="start or stop the embedded Spark Connect server", description=__doc__)
    p.add_argument("action", choices=["start", "stop", "status"])
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    spark = engine_for(load_config(args.config))
    remote = spark.remote_url()
    if remote:
        host, port = connect_address(remote)  # not the address's params: they may hold a token
        print(f"deltaport uses the Spark Connect server at {host}:{port} (spark.remote or $SPARK_REMOTE); "
              "the embedded server is not used")
        return 0 if args.action != "status" else _status_remote(spark)
    server = spark.local_server()
    if args.action == "start":
        began = time.monotonic()
        state = server.ensure()
        print(f"Spark Connect server at {state.url} (pid {state.pid}, log {state.log}; "
              f"{time.monotonic() - began:.1f} s; {_idle(state.idle_timeout)}); stop it with `deltaport spark stop`")
        return 0
    if args.action == "stop":
        print("Spark Connect server stopped" if server.stop() else "no embedded Spark Connect server is running")
        return 0
    state = server.status()
    if state is None:
        starting = server.starting()
        print(f"starting (keeper pid {starting.keeper}, log {starting.log})" if starting else
              "not running (it starts on the first run, sync or read)")
        return 1
    print(f"running at {state.url} (pid {state.pid}, log {state.log}, up {time.time() - state.started_at:.0f} s, "
          f"{_idle(state.idle_timeout)})")
    return 0


def _idle(seconds: float) -> str:
    return f"stops after {seconds / 60:g} min with no client" if seconds else "no idle timeout"


def _status_remote(spark: EngineSettings) -> int:
    session = spark.session()
    print(f"reachable: Spark {session.version}")
    return 0


@contextlib.contextmanager
def engine_for_demo() -> Iterator[str]:
    """The sc:// address the demo runs on: $SPARK_REMOTE, else the embedded server of this
    checkout (``<state_dir>/spark.json``, outside the demo's folder, which is wiped at each
    start), started if it is not running and then stopped at exit; one already running (e.g.
    from `make dev`) is reused warm and left running. The demo holds the server while it runs:
    its runs reach it through $SPARK_REMOTE, which cannot start it again, so no idle timeout
    may stop it before the demo ends (a demo killed outright leaves a stale hold, which holds
    nothing)."""
    if os.environ.get("SPARK_REMOTE"):
        yield os.environ["SPARK_REMOTE"]
        return
    server = EngineSettings(state_dir=str(state_dir())).local_server()
    with server.hold():  # before the look: a running server must not stop between it and the demo's runs
        running = server.status()
        began = time.monotonic()
        state = running or server.ensure()
        print(f"Spark Connect server at {state.url} ({'already running' if running else 'started'}, "
              f"{time.monotonic() - began:.1f} s; log {state.log})", flush=True)
        try:
            yield state.url
        finally:
            if running is None:
                from resources.spark.session import close_sessions

                close_sessions(state.url)
                server.stop()
                print("Spark Connect server stopped", flush=True)

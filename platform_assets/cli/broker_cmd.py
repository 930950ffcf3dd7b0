"""`deltaport broker start|stop|status|run`: the embedded Apache Kafka broker, for the demo and
for trying the other commands by hand. `start` runs the broker in the background and records
its address in `.deltaport/broker.json` (the other commands find it there); `run` keeps it in
the foreground until Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from platform_assets.cli.common import broker_state_file, state_dir
from resources.errors import DeltaportError
from resources.kafka.broker import EmbeddedKafka


def register(sub) -> None:
    p = sub.add_parser("broker", help="start or stop the embedded Kafka broker", description=__doc__)
    p.add_argument("action", choices=["start", "stop", "status", "run"])
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for start or stop")
    p.set_defaults(run=run)


def run(args) -> int:
    return {"start": _start, "stop": _stop, "status": _status, "run": _run}[args.action](args)


def _read_state() -> dict | None:
    path = broker_state_file()
    return json.loads(path.read_text()) if path.exists() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _run(args) -> int:
    """Foreground: start the broker, publish its address, wait for a signal, stop it."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    state_dir().mkdir(parents=True, exist_ok=True)
    with EmbeddedKafka(start_timeout=args.timeout) as kafka:
        broker_state_file().write_text(json.dumps({
            "bootstrap_servers": kafka.bootstrap_servers, "pid": os.getpid(), "log": str(kafka.log_path),
        }))
        print(f"Kafka broker up at {kafka.bootstrap_servers} (log: {kafka.log_path}); Ctrl-C stops it", flush=True)
        try:
            while not stop.wait(1.0):
                if not kafka.running:
                    raise DeltaportError(f"the broker exited by itself; log tail:\n{kafka.log_tail()}")
        finally:
            broker_state_file().unlink(missing_ok=True)
    print("Kafka broker stopped", flush=True)
    return 0


def _start(args) -> int:
    state = _read_state()
    if state and _alive(state["pid"]):
        print(f"Kafka broker already running at {state['bootstrap_servers']}")
        return 0
    broker_state_file().unlink(missing_ok=True)
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / "broker-cli.log"
    with open(log, "wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "platform_assets.cli", "broker", "run"],
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        state = _read_state()
        if state:
            print(f"Kafka broker running at {state['bootstrap_servers']} (pid {state['pid']}); "
                  f"stop it with `deltaport broker stop`")
            return 0
        if child.poll() is not None:
            raise DeltaportError(f"the broker did not start; output:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    child.terminate()
    raise DeltaportError(f"the broker did not start within {args.timeout:.0f} s; output:\n{log.read_text()[-4000:]}")


def _stop(args) -> int:
    state = _read_state()
    if not state or not _alive(state["pid"]):
        broker_state_file().unlink(missing_ok=True)
        print("no embedded Kafka broker is running")
        return 0
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while _alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(0.3)
    if _alive(state["pid"]):
        os.kill(state["pid"], signal.SIGKILL)
    broker_state_file().unlink(missing_ok=True)
    print("Kafka broker stopped")
    return 0


def _status(args) -> int:
    state = _read_state()
    if state and _alive(state["pid"]):
        print(f"running at {state['bootstrap_servers']} (pid {state['pid']}, log {state['log']})")
        return 0
    print("not running")
    return 1

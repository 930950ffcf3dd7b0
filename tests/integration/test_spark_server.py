"""The embedded Spark engine's life cycle, through `deltaport spark` and `SparkResource`.

A server of its own (not the session's $SPARK_REMOTE one), in a temporary state folder: started
by the CLI, found warm by a resource, killed with SIGKILL, started again by two processes at
once (one server, one address), reconnected to by the same resource, stopped by the CLI.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from resources.spark.resource import SparkResource
from resources.spark.server import LocalSparkServer, _alive

pytestmark = pytest.mark.integration


def _cli(config, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    return subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", *args, "-c", str(config)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_embedded_server_starts_once_survives_a_kill_and_stops(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    config = tmp_path / "deltaport.yaml"
    config.write_text("datamarts: [{name: a, signal_topic: s, backup_topic: b}]\nstate_dir: state\n"
                      "lake: {warehouse: lake}\n")
    state_dir = tmp_path / "state"

    assert _cli(config, "status").returncode == 1  # not running yet: says so, non-zero
    started = _cli(config, "start")
    assert started.returncode == 0, started.stderr
    first = json.loads((state_dir / "spark.json").read_text())
    assert first["url"] in started.stdout and first["url"].startswith("sc://127.0.0.1:")
    status = _cli(config, "status")
    assert status.returncode == 0 and first["url"] in status.stdout

    resource = SparkResource(state_dir=str(state_dir), warehouse=str(tmp_path / "lake"))
    session = resource.get_session()
    assert session.sql("SELECT 41 + 1 AS n").collect()[0]["n"] == 42
    assert resource.get_session() is session  # warm: the same session, no new connection

    scratch = state_dir / "local"  # spark.local.dir: the jar copies and shuffle files
    leftover = {d.name for d in scratch.glob("spark-*")}
    assert leftover, "the server keeps its scratch in its state folder, not in /tmp"
    os.kill(first["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert resource.local_server().status() is None  # dead: not reported as running

    # Two processes find it dead at once: the lock lets one start a server, both get its address.
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: _cli(config, "start"), range(2)))
    assert all(r.returncode == 0 for r in both), [r.stderr for r in both]
    second = json.loads((state_dir / "spark.json").read_text())
    assert second["pid"] != first["pid"]
    urls = {re.search(r"sc://[\d.]+:\d+", r.stdout).group(0) for r in both}
    assert urls == {second["url"]}
    assert not leftover & {d.name for d in scratch.glob("spark-*")}  # a killed server's scratch is gone

    again = resource.get_session()  # the same resource reconnects to the new server
    assert again is not session and session.is_stopped  # the dead server's session is closed
    assert again.sql("SELECT 1 AS n").collect()[0]["n"] == 1

    stopped = _cli(config, "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not (state_dir / "spark.json").exists() and not _alive(second["pid"])
    assert LocalSparkServer(state_dir, {}).status() is None
    assert _cli(config, "status").returncode == 1

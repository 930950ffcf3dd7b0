"""The embedded Spark engine's life cycle, through `deltaport spark` and `SparkResource`.

A server of its own (not the session's $SPARK_REMOTE one), in a temporary state folder: started
by the CLI, found warm by a resource, killed with SIGKILL, started again by two processes at
once (one server, one address), reconnected to by the same resource, stopped by the CLI.

No server outlives its record (issue 31): a starter SIGKILLed while its server starts leaves no
JVM that the next command does not know of, an idle server stops itself after
`spark.idle_timeout_minutes`, and a server whose state folder is deleted ends. Servers are
counted as processes, by the state folder their command line names, not by what the record says.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from platform_assets.config import load_config
from platform_assets.engine import engine_for
from resources.failpoints import ENV as FAILPOINTS
from resources.spark.resource import SparkResource
from resources.spark.server import CONNECT_SERVER_CLASS, LocalSparkServer, _alive, server_class_archive
from resources.spark.session import close_sessions

pytestmark = pytest.mark.integration


def _cli(config, *args: str, failpoints: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", FAILPOINTS)}
    if failpoints:
        env[FAILPOINTS] = failpoints
    return subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", *args, "-c", str(config)],
                          capture_output=True, text=True, timeout=300, env=env)


def _jvm_args(pid: int) -> list[str]:
    return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]


def test_embedded_server_starts_once_survives_a_kill_and_stops(tmp_path, monkeypatch):
    """... with the venv's class archive (resources/class_archive.py; `make jars` makes it): the
    server maps it, or, when there is none yet, dumps one that its orderly stop publishes."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    config = tmp_path / "deltaport.yaml"
    config.write_text("datamarts: [{name: a, signal_topic: s, backup_topic: b}]\nstate_dir: state\n"
                      "lake: {warehouse: lake}\n")
    state_dir = tmp_path / "state"
    archive = server_class_archive(engine_for(load_config(config)).local_server().settings)
    assert archive is not None

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
    if archive.final.is_file():
        assert f"-XX:SharedArchiveFile={archive.final}" in _jvm_args(first["pid"])
        assert str(archive.final) in Path(f"/proc/{first['pid']}/maps").read_text()
    else:
        assert any(a.startswith("-XX:ArchiveClassesAtExit=") for a in _jvm_args(first["pid"]))
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

    assert archive.final.is_file()  # mapped, or dumped at the orderly stop and published


def _config(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    config = tmp_path / "deltaport.yaml"
    config.write_text("datamarts: [{name: a, signal_topic: s, backup_topic: b}]\nstate_dir: state\n"
                      f"lake: {{warehouse: lake}}\n{extra}")
    return config, tmp_path / "state"


def _servers(state_dir: Path) -> list[int]:
    """Pids of the Spark Connect servers whose scratch is in `state_dir` (``spark.local.dir`` on
    their command line), whatever any record says: spark-submit's scripts exec the JVM, so one
    server is one process (the launcher's short-lived helper JVM is left out)."""
    scratch = f"spark.local.dir={state_dir}/local"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if scratch in args and CONNECT_SERVER_CLASS in args and "org.apache.spark.launcher.Main" not in args:
            found.append(int(entry.name))
    return sorted(found)


def _servers_after(state_dir: Path, within: float = 90.0) -> list[int]:
    """The servers of `state_dir` once none is left, or those still running after `within` s."""
    deadline = time.monotonic() + within
    while _servers(state_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _servers(state_dir)


@pytest.fixture
def no_spark_remote(monkeypatch, tmp_path):
    """The embedded server of `tmp_path/state`; whatever server of that folder a test leaves
    behind (a failing one) is killed afterwards."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    yield
    for pid in _servers(tmp_path / "state"):
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_a_starter_killed_while_its_server_starts_leaves_no_unrecorded_server(tmp_path, no_spark_remote):
    config, state_dir = _config(tmp_path)
    # Killed 1 s after the server's JVM was launched: the server is still starting (6-9 s).
    killed = _cli(config, "start", failpoints="spark.server_launched~1000")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _servers(state_dir), "the killed starter had launched a server"

    started = _cli(config, "start")  # the next command: one server, the one its record names
    assert started.returncode == 0, started.stderr
    record = json.loads((state_dir / "spark.json").read_text())
    assert _servers(state_dir) == [record["pid"]]

    stopped = _cli(config, "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert _servers_after(state_dir) == []


def test_an_idle_server_stops_itself_and_a_connected_one_does_not(tmp_path, no_spark_remote):
    config, state_dir = _config(tmp_path, "spark: {idle_timeout_minutes: 0.05}\n")  # 3 s
    engine = engine_for(load_config(config))
    session = engine.session()
    state = engine.local_server().status()
    assert session.sql("SELECT 1 AS n").collect()[0]["n"] == 1
    time.sleep(10)  # over three idle timeouts, the session connected all along
    assert session.sql("SELECT 2 AS n").collect()[0]["n"] == 2
    assert engine.local_server().status() == state and _servers(state_dir) == [state.pid]

    close_sessions(state.url)  # the last client goes: the server is idle from now on
    assert _servers_after(state_dir) == []
    assert not (state_dir / "spark.json").exists()
    assert _cli(config, "status").returncode == 1


def test_a_deleted_state_dir_ends_its_server(tmp_path, no_spark_remote):
    config, state_dir = _config(tmp_path)
    started = _cli(config, "start")
    assert started.returncode == 0, started.stderr
    assert len(_servers(state_dir)) == 1
    shutil.rmtree(state_dir)  # its record with it: nothing could find or stop this server any more
    assert _servers_after(state_dir) == []

"""No embedded Spark server outlives its record (issue 31), checked against a stand-in
`spark-submit` (tests/support/spark_stand_in.py) so that every kill window is exact and fast.

A starter SIGKILLed (a failpoint, as the OOM killer would) before it hands its keeper the launch
leaves nothing running; after the launch, a recorded server that the next starter adopts. The
server dies with its keeper, stops when its record goes, and stops when idle unless a client is
connected or a living process holds it. Servers of the folder that no record names (left by an
older deltaport) are stopped by the next start and by `stop()`. The real server's cases are in
tests/integration/test_spark_server.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resources import net
from resources.failpoints import ENV as FAILPOINTS
from resources.spark import server as server_module
from resources.spark.record import CONNECT_SERVER_CLASS, read_state, server_processes
from resources.spark.server import LocalSparkServer
from tests.support.spark_stand_in import stand_in

ROOT = Path(__file__).resolve().parents[2]
STARTER = """
import sys
from pathlib import Path
from resources.spark import server
server.spark_submit = lambda: Path(sys.argv[2])
server.LocalSparkServer(sys.argv[1], {"spark.master": "local[1]"}, start_timeout=30).ensure()
"""


@pytest.fixture
def folder(tmp_path):
    """The state folder; any server of it a failing test leaves is killed afterwards."""
    state = tmp_path / "state"
    yield state
    for pid in server_processes(state):
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def _starter(folder: Path, script: Path, failpoints: str) -> subprocess.CompletedProcess:
    """A starter in a process of its own, armed to die at `failpoints`."""
    env = {**os.environ, FAILPOINTS: failpoints,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", STARTER, str(folder), str(script)], env=env,
                          capture_output=True, text=True, timeout=60)


def _server(tmp_path, monkeypatch, mode: str, idle: float = 0.0) -> LocalSparkServer:
    script = stand_in(tmp_path, mode)
    monkeypatch.setattr(server_module, "spark_submit", lambda: script)
    return LocalSparkServer(tmp_path / "state", {"spark.master": "local[1]"}, start_timeout=30, idle_timeout=idle)


def _until(check, within: float = 20.0):
    """`check()` once true, or its last value after `within` s."""
    deadline = time.monotonic() + within
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def _none_left(folder: Path) -> bool:
    return not server_processes(folder)


def test_a_starter_killed_before_it_hands_the_launch_over_leaves_nothing(tmp_path, folder):
    killed = _starter(folder, stand_in(tmp_path, "binds"), "spark.keeper_spawned")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    log = folder / "spark-server.log"
    assert _until(lambda: "nothing launched" in log.read_text()), log.read_text()
    assert server_processes(folder) == [] and not (folder / "spark.json").exists()


def test_a_starter_killed_while_its_server_starts_leaves_it_to_the_next_starter(tmp_path, monkeypatch, folder, caplog):
    killed = _starter(folder, stand_in(tmp_path, "slow"), "spark.server_launched")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = read_state(folder / "spark.json")
    assert left is not None and not left.ready and server_processes(folder) == [left.pid]

    server = _server(tmp_path, monkeypatch, "slow")
    state = server.ensure()  # adopted: the same server, no second one
    assert f"adopting the Spark Connect server a starter left starting (keeper pid {left.keeper})" in caplog.text
    assert state.pid == left.pid and state.ready and server_processes(folder) == [left.pid]
    assert server.stop() and _until(lambda: _none_left(folder))


def test_the_server_dies_with_its_keeper(tmp_path, monkeypatch, folder):
    state = _server(tmp_path, monkeypatch, "binds").ensure()
    assert server_processes(folder) == [state.pid] and state.keeper != state.pid
    os.kill(state.keeper, signal.SIGKILL)
    assert _until(lambda: _none_left(folder))


def test_a_server_whose_record_is_removed_stops(tmp_path, monkeypatch, folder):
    _server(tmp_path, monkeypatch, "binds").ensure()
    (folder / "spark.json").unlink()
    assert _until(lambda: _none_left(folder))
    assert "is gone or names another server" in (folder / "spark-server.log").read_text()


def test_an_idle_server_stops_unless_a_client_or_a_hold_keeps_it(tmp_path, monkeypatch, folder):
    server = _server(tmp_path, monkeypatch, "binds", idle=1.0)
    with server.hold():
        state = server.ensure()
        time.sleep(3)  # three idle timeouts, held
        assert server.status() == state
    with socket.create_connection(("127.0.0.1", state.port)):
        time.sleep(3)  # three more, a client connected
        assert server.status() == state
    assert _until(lambda: _none_left(folder))  # nobody: it stops itself
    assert not (folder / "spark.json").exists()
    assert "no client connected; idle timeout 1 s" in (folder / "spark-server.log").read_text()


def _orphan(tmp_path: Path, folder: Path) -> subprocess.Popen:
    """A server of `folder` no record names, as a killed starter of an older deltaport left it."""
    return subprocess.Popen([str(stand_in(tmp_path, "binds")), "--class", CONNECT_SERVER_CLASS,
                             "--conf", f"spark.local.dir={folder / 'local'}",
                             "--conf", f"spark.connect.grpc.binding.port={net.free_port()}"], start_new_session=True)


def test_servers_no_record_names_are_stopped_by_the_next_start_and_by_stop(tmp_path, monkeypatch, folder):
    first = _orphan(tmp_path, folder)
    assert _until(lambda: server_processes(folder) == [first.pid])
    server = _server(tmp_path, monkeypatch, "binds")
    state = server.ensure()
    assert first.wait(timeout=20) is not None and server_processes(folder) == [state.pid]

    second = _orphan(tmp_path, folder)
    assert _until(lambda: len(server_processes(folder)) == 2)
    assert server.stop()
    assert second.wait(timeout=20) is not None and _until(lambda: _none_left(folder))

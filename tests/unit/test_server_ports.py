"""Ports of the servers deltaport starts: picked outside the ephemeral range, and a server counts
as up only when its own process listens on its port.

CI once saw the embedded Spark server lose its picked port before it bound it, while the
readiness poll got an answer at that port anyway; every test then waited on an address nobody
served. The start logic is checked here against a stand-in `spark-submit` (a small script that
binds the port it is given, or exits as Spark does when it cannot), so the cases are exact and
fast; the real server's life cycle is in tests/integration/test_spark_server.py.
"""

from __future__ import annotations

import socket

import pytest

from resources import net
from resources.spark import server as server_module
from resources.spark.server import LocalSparkServer, SparkServerError
from tests.support.spark_stand_in import stand_in


@pytest.fixture
def foreign_listener():
    """A port somebody else (this test) listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", net.free_port()))
        s.listen()
        yield s.getsockname()[1]


def test_free_ports_are_below_the_ephemeral_range():
    low = net._ephemeral_low()
    ports = {net.free_port() for _ in range(20)}
    assert all(net._LOWEST <= p < low for p in ports), ports
    assert len(ports) > 1  # picked at random, so two starters rarely race for one


def test_listens_tells_our_listener_from_a_mere_answer(foreign_listener):
    import os

    assert net.listens(os.getpid(), foreign_listener) is True
    with socket.create_connection(("127.0.0.1", foreign_listener)) as client:
        local_port = client.getsockname()[1]
        assert net.listens(os.getpid(), local_port) is False  # a connected socket, not a listener
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        assert net.listens(os.getpid(), other.getsockname()[1]) is False  # bound, not listening


def _server(tmp_path, monkeypatch, ports, mode: str, start_timeout: float) -> LocalSparkServer:
    """A server whose port picks are `ports` (in turn, the last one again) and whose spark-submit
    is the stand-in in `mode`."""
    picks = iter(ports)
    monkeypatch.setattr(server_module, "free_port", lambda: next(picks, ports[-1]))
    monkeypatch.setattr(server_module, "spark_submit", lambda: stand_in(tmp_path, mode))
    return LocalSparkServer(tmp_path / "state", {"spark.master": "local[1]"}, start_timeout=start_timeout)


def test_a_port_taken_before_the_server_binds_it_is_replaced(tmp_path, monkeypatch, foreign_listener):
    server = _server(tmp_path, monkeypatch, [foreign_listener, net.free_port()], "binds", 30)
    try:
        state = server.ensure()
        assert state.port != foreign_listener
        assert net.listens(state.pid, state.port) is True
        log = server.log_path.read_text()
        assert f"on 127.0.0.1:{foreign_listener}" in log and "BindException" in log
        assert server.status() == state
    finally:
        server.stop(timeout=5)


def test_an_answer_from_someone_else_is_not_a_started_server(tmp_path, monkeypatch, foreign_listener):
    server = _server(tmp_path, monkeypatch, [foreign_listener], "deaf", 2)
    with pytest.raises(SparkServerError, match="did not answer within"):
        server.ensure()
    assert not server.state_path.exists()


def test_a_server_that_keeps_losing_its_port_fails_naming_the_cause(tmp_path, monkeypatch, foreign_listener):
    server = _server(tmp_path, monkeypatch, [foreign_listener], "binds", 30)
    with pytest.raises(SparkServerError, match="lost its port 3 times"):
        server.ensure()

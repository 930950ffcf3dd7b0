"""A `spark.remote` where nothing listens fails within seconds naming the address (not pyspark's
ten minutes of retries), without ever printing the address's params (a token)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from resources.spark import session
from resources.spark.session import SparkSessionError, connect_address, _wait_answering


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("url, want", [
    ("sc://127.0.0.1:15010", ("127.0.0.1", 15010)),
    ("sc://spark.example.com", ("spark.example.com", 15002)),
    ("sc://spark.example.com:443/;use_ssl=true;token=SECRET", ("spark.example.com", 443)),
    ("sc://[::1]:15002", ("::1", 15002)),
    ("sc://host:port", ("host", None)),
])
def test_address(url: str, want: tuple) -> None:
    assert connect_address(url) == want


def test_nothing_listening_fails_fast_naming_the_address_not_the_token() -> None:
    port = _free_port()
    began = time.monotonic()
    with pytest.raises(SparkSessionError) as err:
        _wait_answering(f"sc://127.0.0.1:{port}/;token=SECRET", 1.0)
    assert time.monotonic() - began < 5
    assert f"127.0.0.1:{port}" in str(err.value) and "SECRET" not in str(err.value)
    assert "spark.remote" in str(err.value)


def test_connect_refuses_a_remote_that_is_gone(monkeypatch) -> None:
    monkeypatch.setattr(session, "REMOTE_ANSWER_SECONDS", 0.5)
    with pytest.raises(SparkSessionError, match="no Spark Connect server answers"):
        session.connect(f"sc://127.0.0.1:{_free_port()}")


def test_a_server_that_comes_up_while_waiting_is_accepted() -> None:
    port = _free_port()
    listener = socket.socket()

    def listen_later() -> None:
        time.sleep(1.0)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    threading.Thread(target=listen_later, daemon=True).start()
    try:
        _wait_answering(f"sc://127.0.0.1:{port}", 10.0)  # returns: a restarting server is waited for
    finally:
        listener.close()

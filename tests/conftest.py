"""Shared fixtures.

`kafka_bootstrap` is one real Kafka broker for the whole session: the one named by
KAFKA_BOOTSTRAP_SERVERS if set, else an embedded Apache Kafka (resources/kafka/broker.py) that
is started on first use and stopped at the end of the session.
`postgres` is one real PostgreSQL server for the session (tests/support/postgres.py): a
throwaway local cluster, or the one of DELTAPORT_TEST_POSTGRES_URL; its password is exported in
DELTAPORT_TEST_PG_PASSWORD, the variable the tests' state stores name as `password_env`.
`demo_once` is one `deltaport demo --once --deltas 2` for the session (tests/support/demo_once.py),
looked at by the UI test and test_clean_logs.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from resources.kafka import broker
from tests.support.demo_once import DemoOnce, run_demo_once, shared_demo_once
from tests.support.postgres import PASSWORD_ENV, PostgresServer, start_postgres


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers ("host:port") of a running Kafka broker."""
    with broker.kafka_bootstrap() as bootstrap:
        yield bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (and this run): legal, at most ~90 characters."""
    test = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"test-{test}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL server; `postgres.database()` makes an empty database on it."""
    server = start_postgres()
    os.environ[PASSWORD_ENV] = server.password or ""
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def demo_once(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> DemoOnce:
    """The run's `deltaport demo --once --deltas 2`, run as a user runs it (a process of its own,
    the session's Spark server when $SPARK_REMOTE is set); its folder and log. One per run: under
    pytest-xdist the workers share it (their base temp folders have one parent)."""
    if worker_id == "master":
        return run_demo_once(tmp_path_factory.mktemp("demo"))
    return shared_demo_once(tmp_path_factory.getbasetemp().parent)

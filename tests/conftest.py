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


# The longest test files, longest first (seconds per file in a fresh-clone `make test`,
# 2026-11-28). `make test` hands files to its two workers in collection order
# (`--dist loadfile --no-loadscope-reorder`; xdist's own order puts the files with the most
# tests first: the unit tests, then these last, one worker left alone with the longest while
# the other idles). Longest first, the unit tests' many short files fill the end. A file not
# listed keeps its place after these; a stale list only orders worse, it never fails.
LONGEST_FIRST = (
    "integration/test_wide_datamart.py", "integration/test_multi_host.py", "integration/test_partition_window.py",
    "integration/test_untagged_reads.py", "integration/test_cdc_lake.py",
    "integration/test_streams_e2e.py", "integration/test_objstore_platform.py", "ui/test_ui.py",
    "integration/test_stream_progress_mark.py", "integration/test_untouched_tables.py",
    "integration/test_daemon_faults.py", "integration/test_export_roundtrip.py", "integration/test_spark_server.py", "integration/test_objstore_lake.py",
    "integration/test_history_forms.py", "integration/test_platform.py", "integration/test_read_cli.py",
    "integration/test_delta_step.py", "integration/test_stream_history.py", "integration/test_clean_logs.py",
    "integration/test_bad_chunks.py", "integration/test_history_layout.py", "integration/test_sql_corpus.py",
    "integration/test_maintenance.py", "integration/test_pyiceberg_read.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (`LONGEST_FIRST`), then the other integration and UI files, then the
    unit tests; each file's tests in their own order."""
    tests = os.path.dirname(__file__)

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = os.path.relpath(str(item.path), tests)
        if path in LONGEST_FIRST:
            return (0, LONGEST_FIRST.index(path))
        return (2, 0) if path.startswith("unit" + os.sep) else (1, 0)

    items.sort(key=rank)  # stable: the rest keep their collection order


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In pytest-xdist's controller, once every worker is done: stop the Spark server the workers
    shared (tests/support/session_spark.py). Workers never stop it: one that finishes first would
    stop it under the other."""
    if not session.config.pluginmanager.has_plugin("dsession"):  # a worker, or a run without xdist
        return
    from tests.support.session_spark import stop_shared_spark_server  # only here: no Spark import at start-up

    stop_shared_spark_server(session.config._tmp_path_factory.getbasetemp())  # pytest's, behind tmp_path_factory

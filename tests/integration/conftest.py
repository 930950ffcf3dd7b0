"""Integration fixtures for Spark + Iceberg.

`spark_remote` is ONE Spark Connect server for the whole test session, the way deltaport runs
in production: $SPARK_REMOTE if set, else the embedded local server (`resources.spark.server`)
started in a temporary folder and stopped at the end (under pytest-xdist, one for all workers:
tests/support/session_spark.py). Its address is exported as $SPARK_REMOTE,
so every `SparkResource`, Dagster run and `deltaport` subprocess of the tests uses it too.
`spark` is a client session on it with an Iceberg Hadoop catalog ``lake`` in a temporary
warehouse; tests isolate themselves by table names (`lake_ns` gives each its own namespace).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.support.session_spark import session_spark_server, shared_spark_state


@pytest.fixture(scope="session")
def spark_remote(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[str]:
    """The sc:// address of the session's Spark Connect server. Under pytest-xdist the workers
    share one (`shared_spark_state`): the first to ask starts it, and the controller stops it
    when the run ends (`stop_shared_spark_server`, tests/conftest.py)."""
    if os.environ.get("SPARK_REMOTE"):
        yield os.environ["SPARK_REMOTE"]
        return
    from resources.spark.session import close_sessions

    shared = worker_id != "master"
    state = shared_spark_state(tmp_path_factory.getbasetemp().parent) if shared else tmp_path_factory.mktemp("spark")
    server = session_spark_server(state, shared=shared)
    url = server.ensure().url
    os.environ["SPARK_REMOTE"] = url
    _embedded.append(server)
    try:
        yield url
    finally:
        _embedded.remove(server)
        os.environ.pop("SPARK_REMOTE", None)
        close_sessions(url)
        if not shared:
            server.stop()


_embedded: list = []  # the session's embedded server, while it is up


@pytest.fixture(scope="session")
def spark_server_log(spark_remote: str):
    """The session's embedded Spark server log (None when the tests use $SPARK_REMOTE's)."""
    return _embedded[0].log_path if _embedded else None


@pytest.fixture(autouse=True)
def _spark_server_alive(request: pytest.FixtureRequest) -> None:
    """Stop the whole session, saying why, when the session's server has died: every later test
    would otherwise wait out the Connect client's patient retries (~10 minutes each)."""
    if _embedded and "spark_remote" in request.fixturenames and _embedded[0].status() is None:
        from resources.spark.server import _tail

        server = _embedded[0]
        pytest.exit(f"the test session's Spark Connect server is gone; log {server.log_path}:\n"
                    f"{_tail(server.log_path)}", returncode=3)


@pytest.fixture(scope="session")
def spark(spark_remote: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A Spark Connect session with an Iceberg Hadoop catalog named ``lake`` in a temporary warehouse."""
    from resources.spark.session import CatalogConfig, connect

    warehouse = tmp_path_factory.mktemp("lake")
    started = time.monotonic()
    session = connect(spark_remote, CatalogConfig(name="lake", warehouse=str(warehouse)))
    session.conf.set("deltaport.tests.start-seconds", f"{time.monotonic() - started:.2f}")
    yield session


@pytest.fixture
def lake_ns(spark: object, request: pytest.FixtureRequest) -> str:
    """A namespace of the ``lake`` catalog unique to this test: ``lake.<test>_<random>``."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name).strip("_").lower()[:40]
    return f"lake.{name}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """moto's S3 server on loopback for the session (resources/demo_objstore/s3_server.py), and the
    session's random secret key in $DELTAPORT_TEST_S3_SECRET and catalog credential in
    $DELTAPORT_TEST_CATALOG_CREDENTIAL (neither server checks them; the tests check that they are
    never printed)."""
    from resources.demo_objstore.s3_server import S3Server
    from tests.support.objstore import CREDENTIAL_ENV, SECRET_ENV, new_secret

    os.environ[SECRET_ENV] = new_secret()
    os.environ[CREDENTIAL_ENV] = f"deltaport:{new_secret()}"
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    try:
        yield server
    finally:
        server.stop()
        os.environ.pop(SECRET_ENV, None)
        os.environ.pop(CREDENTIAL_ENV, None)


@pytest.fixture(scope="module")
def s3_endpoint(s3_store) -> str:
    """Where a module's S3 clients reach the store: the store itself (a module overrides it to
    put a fault proxy in between)."""
    return s3_store.endpoint


@pytest.fixture(scope="module")
def rest_catalog(s3_store, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Iceberg's REST catalog server on loopback for one test module, its warehouse in a bucket of
    its own on `s3_store`, reached at `s3_endpoint` (resources/demo_objstore/rest_catalog.py): a
    module's datamarts never meet another module's namespaces."""
    from resources.demo_objstore.rest_catalog import RestCatalogServer
    from tests.support.objstore import SECRET_ENV, s3_properties

    folder = tmp_path_factory.mktemp("rest")
    bucket = s3_store.make_bucket(f"lake-{uuid.uuid4().hex[:12]}")
    server = RestCatalogServer(folder, warehouse=f"{bucket}/warehouse",
                               properties={**s3_properties(s3_endpoint, os.environ[SECRET_ENV]),
                                           **s3_store.client_properties}).start()
    try:
        yield server
    finally:
        server.stop()

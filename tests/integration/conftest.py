"""Integration fixtures for Spark + Iceberg.

`spark` is ONE real local Spark session (local[2], Iceberg runtime from the Maven cache) for the
whole test session: starting a JVM costs seconds, so tests share it and isolate themselves by
table names instead (`lake_ns` gives each test its own namespace). Its Hadoop-catalog warehouse
is a temporary folder removed by pytest; the session is stopped at the end.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A SparkSession with an Iceberg Hadoop catalog named ``lake`` in a temporary warehouse."""
    from resources.spark.session import CatalogConfig, build_spark_session

    warehouse = tmp_path_factory.mktemp("lake")
    started = time.monotonic()
    session = build_spark_session(master="local[2]", app_name="deltaport-tests",
                                  catalog=CatalogConfig(name="lake", warehouse=str(warehouse)),
                                  conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    session.conf.set("deltaport.tests.start-seconds", f"{time.monotonic() - started:.2f}")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def lake_ns(spark: object, request: pytest.FixtureRequest) -> str:
    """A namespace of the ``lake`` catalog unique to this test: ``lake.<test>_<random>``."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name).strip("_").lower()[:40]
    return f"lake.{name}_{uuid.uuid4().hex[:8]}"

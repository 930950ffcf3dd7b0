"""The Spark engine a benchmark measures: one Spark Connect server, as deltaport runs.

$SPARK_REMOTE if set (a running server: its process is not ours to measure, so its memory is
reported as unknown), else an embedded server started in the benchmark's scratch folder with
the same settings deltaport's own starts with, stopped at the end. Yields the client session
(Iceberg catalog ``lake`` in `warehouse`), the server's pid (for bench/peak_memory.py) and
the seconds the engine took to be ready (a cold server start is the cost a first run pays once).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from resources.spark.engine import EngineSettings
from resources.spark.session import CatalogConfig, close_sessions


@dataclass
class Engine:
    spark: object  # pyspark.sql.SparkSession (Connect)
    url: str
    server_pid: int | None
    start_seconds: float
    log_path: Path | None = None  # the embedded server's log (None for a remote engine)


@contextlib.contextmanager
def bench_engine(work: Path, *, master: str = "local[2]", conf: Mapping[str, str] | None = None) -> Iterator[Engine]:
    """The benchmark's engine: an embedded server started with deltaport's defaults, `conf`
    overriding them (to measure a setting against the default), or the configured remote one."""
    began = time.perf_counter()
    settings = EngineSettings(master=master, state_dir=str(work / "spark"),
                              catalog=CatalogConfig(name="lake", warehouse=str(work / "lake")), conf=dict(conf or {}))
    server = None if settings.remote_url() else settings.local_server()
    spark = settings.session()  # starts the embedded server when there is no remote one
    state = server.status() if server is not None else None
    url = state.url if state is not None else settings.remote_url()
    if state is not None:
        os.environ["SPARK_REMOTE"] = url  # Dagster runs and subprocesses of the benchmark use it too
    try:
        yield Engine(spark, url, state.pid if state else None, time.perf_counter() - began,
                     server.log_path if server is not None else None)
    finally:
        close_sessions(url)
        if server is not None:
            os.environ.pop("SPARK_REMOTE", None)
            server.stop()


def spark_conf_pair(text: str) -> tuple[str, str]:
    """--spark-conf KEY=VALUE, as argparse's `type`."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()

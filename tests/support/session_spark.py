"""The test session's embedded Spark Connect server (the `spark_remote` fixture of
tests/integration/conftest.py).

Under pytest-xdist (`make test` runs two workers) the workers share one server, started by the
first worker that needs it in a folder beside the workers' own (`shared_spark_state`), and
stopped by the controller when the run ends (`stop_shared_spark_server`). Why one: the suite is
CPU-bound on the server, and a server of its own per worker paid twice for what a JVM pays once
per process: the JIT compiling the same planner, Iceberg and Connect code (C2's threads took
85-165 CPU seconds of a scenario file's run), the class loading, and a heap each. The workers'
tests keep apart as they do on one worker: each worker's client session has its own Iceberg
catalog warehouse, and tests name their own namespaces.
"""

from __future__ import annotations

from pathlib import Path

from resources.spark.server import LocalSparkServer

STATE_FOLDER = "spark-shared"


def shared_spark_state(root: Path) -> Path:
    """The shared server's state folder under the workers' common base folder `root`."""
    return root / STATE_FOLDER


def session_spark_server(state: Path, *, shared: bool) -> LocalSparkServer:
    """The session's server recorded in `state` (started by `.ensure()`, by whichever process asks
    first: the server's own state lock keeps it to one). `shared`: the workers' server."""
    from resources.spark.session import CatalogConfig, embedded_server_conf

    # Shared, local[4]: the two workers' jobs get the two task slots each had on a server of its
    # own (the eight-file set: 445.9 and 419.1 s against 499.3 s with local[2], run between them).
    return LocalSparkServer(state, embedded_server_conf(
        master="local[4]" if shared else "local[2]", catalog=CatalogConfig(name="lake", warehouse=str(state / "lake")),
        conf={"spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}))


def stop_shared_spark_server(root: Path) -> bool:
    """Stop the workers' shared server under `root`, if one was started; True when one was."""
    state = shared_spark_state(root)
    return state.is_dir() and session_spark_server(state, shared=True).stop()

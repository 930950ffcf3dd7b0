"""A Spark standalone cluster on loopback for the tests: one master and N workers, started with the
`spark-class` that pip's pyspark ships (no download), each worker with its own work folder; the
Spark Connect server is then started with `spark.master=spark://127.0.0.1:<port>` and becomes the
cluster's driver, so executors on the workers read Kafka (the Python data source) and write Iceberg.
Everything is stopped (SIGTERM, then SIGKILL) at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from resources.net import free_port, serves
from resources.spark.server import engine_env


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@dataclass
class StandaloneCluster:
    master_url: str
    workers: int
    folder: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    def alive_workers(self) -> int:
        """Workers registered ALIVE with the master (its JSON status page)."""
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as r:
            return sum(1 for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE")

    web_port: int = 0


def start_cluster(folder: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                  timeout: float = 120.0) -> StandaloneCluster:
    folder.mkdir(parents=True, exist_ok=True)
    port, web = free_port(), free_port()
    env = {**engine_env(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder)}
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", workers, folder, web_port=web)

    def launch(name: str, args: list[str]) -> None:
        log = open(folder / f"{name}.log", "ab")
        cluster.procs.append(subprocess.Popen([str(spark_class()), *args], stdout=log, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))

    try:
        launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", str(web)])
        master = cluster.procs[-1]  # the JVM itself: spark-class execs java
        _wait(lambda: serves(master.pid, port), timeout, "the standalone master", folder / "master.log")
        for i in range(workers):
            work = folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            launch(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                                   "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                   "--work-dir", str(work)])
        _wait(lambda: cluster.alive_workers() == workers, timeout, f"{workers} workers", folder / "worker-0.log")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(ok, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except OSError:
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s; {log}:\n{tail}")



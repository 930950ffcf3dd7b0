"""The daemon's sensor path on object storage behind a REST catalog (issue 40, item 2): a Prostore
datamart (signal topic + backup topic, the emulator's) lands with no hand on it through the
`dagster-daemon` in a lake whose catalog is Iceberg's REST catalog server and whose files are on
the session's moto S3 store (tests/integration/conftest.py), as `sync` lands one in
test_objstore_lake.py.

The deployment is the daemon fault cases' (bench/fault_daemon.py): a folder with deltaport.yaml,
a workspace and a Dagster home with the project's dagster.yaml, so the runs are launched as
processes of their own by the daemon's code server, reading the lake's secret from the
environment the daemon was started with (`{env: NAME}`), never from the config.

* Every run came from the datamart's sensor and succeeded; every delta is materialized.
* Every table as of every delta equals the emulator's truth, read by Spark and by PyIceberg.
* Small on purpose (2 deltas, one run): the sensor path is what is new here; correctness in
  depth and the store's faults are test_objstore_lake.py's.

Real broker, real Spark, real Dagster daemon, real Iceberg REST server, real S3 API.
"""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest
import yaml

from bench.fault_daemon import Daemon, _deployment, runs_finished, watch
from platform_assets.config import load_config
from platform_assets.definitions import build_definitions
from platform_assets.prostore.partitions import partition_key
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from tests.support.objstore import rest_lake
from tests.support.read_engines import every_delta_equals_the_truth

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 2  # delta 1 changes the schema (a table added)
TIMEOUT = 300  # seconds for the daemon to land both deltas (one run; 42-92 s measured on 2 busy cores)


def test_the_daemons_sensor_lands_every_delta_equal_to_the_truth(kafka_bootstrap, spark_remote, s3_store,
                                                                    rest_catalog, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=47, deltas=DELTAS, datamarts=(DM,), chunk_size=20, ddl_at_delta=1,
                                       faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"objstore-daemon.signal.{os.getpid()}", BACKUP: f"objstore-daemon.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    publish(sc.messages, kafka_bootstrap, topics)
    (tmp_path / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL],
                     "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_store.endpoint, "s3daemon"),
        "state_dir": str(tmp_path / "state"),
    }))
    # The daemon, its code server and its runs get this process's environment: $SPARK_REMOTE (the
    # session's server) and the store's secret and catalog credential the lake block names.
    env = _deployment(tmp_path, dict(os.environ))
    want = {partition_key(n) for n in sc.truth[DM]}
    log = tmp_path / "daemon.log"
    began = time.monotonic()
    daemon = Daemon(tmp_path, env, log)
    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            def done() -> set[str]:
                return set(instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"])))

            problem = watch(daemon, landed=lambda: done() >= want, deadline=began + TIMEOUT, every=0.5,
                            not_landed=lambda: f"landed {sorted(done())} of {sorted(want)} within {TIMEOUT} s: "
                                               f"{log.read_text(errors='replace')[-3000:]}")
            assert problem is None, problem
            assert runs_finished(instance, 60)
            runs = instance.get_runs()
    finally:
        daemon.stop()
    landed_after = time.monotonic() - began
    assert runs and {r.tags.get("dagster/sensor_name") for r in runs} == {f"{DM}_delta_close_sensor"}, runs
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]

    cfg = load_config(str(tmp_path / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    checked = time.monotonic()
    assert every_delta_equals_the_truth(sc, cfg, spark, DM) > 20
    print(f"\nthe daemon landed {DELTAS} deltas in {len(runs)} run(s), {landed_after:.1f} s from its start; "
          f"both engines read them equal to the truth in {time.monotonic() - checked:.1f} s")

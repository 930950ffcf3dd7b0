"""The daemon's sensor path on object storage behind a REST catalog (issue 40, item 2): a Prostore
datamart (signal topic + backup topic, the emulator's) and a Qlik Replicate change stream land
with no hand on them through one `dagster-daemon` in a lake whose catalog is Iceberg's REST
catalog server and whose files are on the session's moto S3 store (tests/integration/conftest.py),
as `sync` lands a datamart in test_objstore_lake.py and a stream in test_objstore_platform.py.

The deployment is the daemon fault cases' (bench/fault_daemon.py): a folder with deltaport.yaml
(both sources), a workspace and a Dagster home with the project's dagster.yaml, so the runs are
launched as processes of their own by the daemon's code server, reading the lake's secret from
the environment the daemon was started with (`{env: NAME}`), never from the config.

* Every run came from a sensor (the datamart's DELTA_CLOSE sensor, the stream's sealing sensor)
  and succeeded; both sensors requested runs; every datamart delta and every sealed stream delta
  is materialized, and the stream's whole topic is read with nothing left unsealed that could
  end a delta.
* Every table as of every delta equals the truth, read by Spark and by PyIceberg: the
  datamart's the emulator's, the stream's the story's after every sealed delta
  (resources/emulator/stream_oracle.py), at least 3 stream deltas compared (one inside Qlik's
  full load would have no truth to compare with).
* Small on purpose (2 datamart deltas, a short stream, one daemon for both): the sensor path
  is what is new here; correctness in depth and the store's faults are test_objstore_lake.py's
  and test_objstore_platform.py's.

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
from platform_assets.definitions import build_definitions, ledger_resource
from platform_assets.deltas.partitions import partition_key
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from tests.support.objstore import rest_lake
from tests.support.read_engines import every_delta_equals_the_truth, every_sealed_delta_equals_the_truth

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 2  # delta 1 changes the schema (a table added)
STREAM = "sales_qlik"
# Seconds for the daemon to land both sources (a run each, side by side): 42-92 s measured for the
# datamart alone on 2 busy cores, 282 s for both under load 19; under pytest's 600 s with the checks.
TIMEOUT = 450


def test_the_daemons_sensors_land_every_delta_equal_to_the_truth(kafka_bootstrap, spark_remote, s3_store,
                                                                  rest_catalog, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=47, deltas=DELTAS, datamarts=(DM,), chunk_size=20, ddl_at_delta=1,
                                       faults=Faults(duplicate_rate=0.0)))
    topics = {SIGNAL: f"objstore-daemon.signal.{os.getpid()}", BACKUP: f"objstore-daemon.backup.{os.getpid()}"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic)
    publish(sc.messages, kafka_bootstrap, topics)
    # The stream's story as test_objstore_platform.py's (duplicates, a rolled-back transaction, a
    # column added), published whole: its sensor seals it in range runs beside the datamart's.
    story = build_qlik_story(QlikConfig(seed=11, transactions=12, duplicate_rate=0.15))
    stream_topic = f"objstore-daemon.qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, stream_topic)
    publish(story.messages, kafka_bootstrap, {QLIK: stream_topic})
    (tmp_path / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL],
                     "backup_topic": topics[BACKUP]},
                    # idle_seconds 0: the story's quiet tail is sealed as soon as it is read, not a minute later
                    {"name": STREAM, "format": QLIK, "topic": stream_topic, "max_rows": 20, "max_seconds": 3600,
                     "idle_seconds": 0}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_store.endpoint, "s3daemon"),
        "state_dir": str(tmp_path / "state"),
    }))
    # The daemon, its code server and its runs get this process's environment: $SPARK_REMOTE (the
    # session's server) and the store's secret and catalog credential the lake block names.
    env = _deployment(tmp_path, dict(os.environ))
    cfg = load_config(str(tmp_path / "deltaport.yaml"))
    ledger = ledger_resource(cfg).get()  # made before the daemon starts, as the instance is: no two first migrations
    want = {partition_key(n) for n in sc.truth[DM]}
    log = tmp_path / "daemon.log"
    began = time.monotonic()
    daemon = Daemon(tmp_path, env, log)
    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            def done(source: str) -> set[str]:
                return set(instance.get_materialized_partitions(dg.AssetKey([source, "snapshot"])))

            def stream_landed() -> bool:
                # The stream has no last delta to wait for: it is landed once its whole topic is
                # read, what is left unsealed can end no delta (late duplicates), and every
                # sealed delta is materialized.
                read = sum(p.next_offset for p in ledger.progress(STREAM).values())
                tail = [m for ms in ledger.tail(STREAM).marks.values() for m in ms]
                sealed = {partition_key(n) for n in ledger.sealed_numbers(STREAM)}
                return (read >= len(story.messages) and all(m.kind == "none" for m in tail)
                        and bool(sealed) and done(STREAM) >= sealed)

            problem = watch(daemon, landed=lambda: done(DM) >= want and stream_landed(), deadline=began + TIMEOUT,
                            every=0.5,
                            not_landed=lambda: f"landed {sorted(done(DM))} of {sorted(want)} and {STREAM}'s "
                                               f"{sorted(done(STREAM))} within {TIMEOUT} s: "
                                               f"{log.read_text(errors='replace')[-3000:]}")
            assert problem is None, problem
            assert runs_finished(instance, 60)
            runs = instance.get_runs()
    finally:
        daemon.stop()
    landed_after = time.monotonic() - began
    assert runs and {r.tags.get("dagster/sensor_name") for r in runs} == {f"{DM}_delta_close_sensor",
                                                                          f"{STREAM}_seal_sensor"}, runs
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]

    spark = build_definitions(cfg).resources["spark"].get_session()
    checked = time.monotonic()
    assert every_delta_equals_the_truth(sc, cfg, spark, DM) > 20
    deltas, rows = every_sealed_delta_equals_the_truth(story, QLIK, cfg, spark, STREAM, kafka_bootstrap)
    assert deltas >= 3 and rows > 20, (deltas, rows)
    sealed = ledger.sealed_numbers(STREAM)
    print(f"\nthe daemon landed {DELTAS} datamart deltas and {len(sealed)} sealed stream deltas in "
          f"{len(runs)} run(s), {landed_after:.1f} s from its start; both engines read them equal to the truth "
          f"({deltas} stream deltas compared) in {time.monotonic() - checked:.1f} s")

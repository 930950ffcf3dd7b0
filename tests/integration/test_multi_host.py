"""Beyond one machine: the Dagster daemon (its sensors) and the runs it launches are separate
processes that share nothing but PostgreSQL (the state store, the Dagster instance, the Iceberg
JDBC catalog), Kafka and a Spark standalone cluster (a master, a worker, the Spark Connect
server as their driver). A datamart and a Qlik stream land; every delta equals the emulator's
truth; then a `deltaport sync` from another working folder and DAGSTER_HOME (another "host")
finds nothing to do and changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from resources.changestream.ledger import CdcLedger
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of
from resources.state.store import StateStore
from tests.support.postgres import PASSWORD_ENV
from tests.support.qlik_truth import judged_qlik_deltas
from tests.support.spark_cluster import start_cluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DM, STREAM = "marketing", "sales_qlik"


@pytest.fixture(scope="module")
def cluster_remote(postgres, tmp_path_factory):
    """A Spark standalone cluster on loopback and a Spark Connect server driving it, with the
    Iceberg JDBC catalog `lake` on PostgreSQL; yields (sc:// address, catalog database URL)."""
    from resources.spark.server import LocalSparkServer
    from resources.spark.session import CatalogConfig, close_sessions, embedded_server_conf

    folder = tmp_path_factory.mktemp("cluster")
    catalog_db = postgres.database("catalog")
    # One worker whose executor has both cores: the executor is still a JVM apart from the
    # driver, reading Kafka and writing Iceberg; a second worker's cold JVMs cost the test 30-50 s.
    cluster = start_cluster(folder / "standalone", workers=1, cores=2)
    catalog = CatalogConfig(name="lake", type="jdbc", uri=postgres.jdbc_url(catalog_db),
                            warehouse=str(folder / "warehouse"), properties={"jdbc.user": "deltaport"},
                            secret_properties={"jdbc.password": PASSWORD_ENV})
    server = LocalSparkServer(folder / "connect", embedded_server_conf(
        master=cluster.master_url, catalog=catalog,
        conf={"spark.executor.memory": "768m", "spark.executor.cores": "2", "spark.cores.max": "2",
              "spark.driver.memory": "1g"}))
    try:
        url = server.ensure().url
        yield url, catalog_db, catalog
    finally:
        close_sessions(url if "url" in locals() else None)
        server.stop()
        cluster.stop()


def host(folder: Path, kafka_bootstrap: str, remote: str, catalog, state_url: str, dagster_db: str, topics) -> dict:
    """A working folder of its own (config, DAGSTER_HOME, state_dir): what one host has. Returns
    the environment its processes run with."""
    folder.mkdir(parents=True)
    cfg = {
        "sources": [
            {"name": DM, "format": "prostore", "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]},
            {"name": STREAM, "format": "qlik", "topic": topics[QLIK], "max_rows": 20, "max_seconds": 3600,
             "idle_seconds": 0},
        ],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "spark": {"remote": remote},
        "lake": {"catalog": catalog.name, "type": "jdbc", "uri": catalog.uri, "warehouse": catalog.warehouse,
                 "properties": {"jdbc.user": "deltaport", "jdbc.password": {"env": PASSWORD_ENV}}},
        "state": {"url": state_url, "password": {"env": PASSWORD_ENV}},
        "state_dir": str(folder / "state"),
        # Few, wide runs: one tick sees the whole backlog, and a run lands up to 10 deltas.
        "sensor": {"interval_seconds": 1, "max_messages_per_tick": 5000, "max_deltas_per_run": 10},
    }
    (folder / "deltaport.yaml").write_text(yaml.safe_dump(cfg))
    (folder / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "platform_assets.definitions", "location_name": "deltaport"}}]}))
    home = folder / "dagster-home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
    pg = dagster_db.split("://", 1)[1]  # user@host:port/db
    user, rest = pg.split("@", 1)
    hostport, db = rest.split("/", 1)
    env = {**os.environ, "DAGSTER_HOME": str(home), "DELTAPORT_CONFIG": str(folder / "deltaport.yaml"),
           "DAGSTER_PG_HOST": hostport.split(":")[0], "DAGSTER_PG_PORT": hostport.split(":")[1],
           "DAGSTER_PG_DB": db, "DAGSTER_PG_USER": user, "DAGSTER_PG_PASSWORD": os.environ[PASSWORD_ENV]}
    env.pop("SPARK_REMOTE", None)  # the config names the engine; nothing leaks from the test session
    return env


def instance_of(env: dict) -> dg.DagsterInstance:
    keys = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD")
    os.environ.update({k: env[k] for k in keys})
    return dg.DagsterInstance.from_config(env["DAGSTER_HOME"])


def _error_text(err) -> str:
    parts = []
    while err is not None:
        parts.append(err.message.strip()[:800])
        err = err.cause
    return " <- ".join(parts)


def failed_runs(instance: dg.DagsterInstance) -> list[str]:
    out = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])):
        errors = [_error_text(e.dagster_event.event_specific_data.error) for e in instance.all_logs(run.run_id)
                  if e.dagster_event and e.dagster_event.is_step_failure]
        out.append(f"run {run.run_id} ({run.tags.get('dagster/partition')}): {errors[-3:]}")
    return out


def test_daemon_and_runs_share_only_postgres_kafka_and_the_cluster(postgres, kafka_bootstrap, cluster_remote,
                                                                   tmp_path):
    remote, _, catalog = cluster_remote
    # Small on purpose: correctness in depth is test_platform's and test_streams_e2e's; here every
    # part runs in a process or host of its own, on two cores.
    sc = build_scenario(EmulatorConfig(seed=5, deltas=3, streams=2, chunk_size=6, backup_partitions=2,
                                       cancel_rate=0.2, ddl_at_delta=1,
                                       faults=Faults(duplicate_rate=0.08, malformed=True)))
    story = build_qlik_story(QlikConfig(seed=11, transactions=7, duplicate_rate=0.15))
    tag = uuid.uuid4().hex[:8]
    topics = {SIGNAL: f"mh.signal.{tag}", BACKUP: f"mh.backup.{tag}", QLIK: f"mh.qlik.{tag}"}
    create_topic(kafka_bootstrap, topics[SIGNAL])
    create_topic(kafka_bootstrap, topics[BACKUP], partitions=2)
    create_topic(kafka_bootstrap, topics[QLIK], partitions=1)
    state_url, dagster_db = postgres.database("state"), postgres.database("dagster")
    env_a = host(tmp_path / "host-a", kafka_bootstrap, remote, catalog, state_url, dagster_db, topics)

    publish(sc.messages, kafka_bootstrap, {SIGNAL: topics[SIGNAL], BACKUP: topics[BACKUP]})
    publish(story.messages, kafka_bootstrap, {QLIK: topics[QLIK]})
    want_dm = sorted(sc.truth[DM])
    ledger = CdcLedger(StateStore(state_url, password_env=PASSWORD_ENV))

    daemon_log = tmp_path / "daemon.log"
    with open(daemon_log, "wb") as log:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                                   str(tmp_path / "host-a" / "workspace.yaml")], cwd=tmp_path / "host-a", env=env_a,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    instance = instance_of(env_a)
    try:
        deadline = time.monotonic() + 600
        while True:
            done_dm = {int(k) for k in instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"]))}
            done_st = {int(k) for k in instance.get_materialized_partitions(dg.AssetKey([STREAM, "snapshot"]))}
            sealed = ledger.sealed_numbers(STREAM)
            if done_dm >= set(want_dm) and sealed and done_st >= set(sealed) and not ledger.tail(STREAM).marks.get(0):
                break
            bad = failed_runs(instance)
            assert not bad, "\n".join(bad)
            assert daemon.poll() is None, daemon_log.read_text()[-4000:]
            assert time.monotonic() < deadline, (f"landed {sorted(done_dm)} of {want_dm}, stream {sorted(done_st)} "
                                                 f"of {sealed}; daemon log:\n{daemon_log.read_text()[-4000:]}")
            time.sleep(1)
    finally:
        os.killpg(daemon.pid, 15)
        daemon.wait(timeout=60)
    runs_a = instance.get_runs_count()
    for r in sorted(instance.get_run_records(), key=lambda r: r.create_timestamp):  # for the log: run sizes, times
        tags = r.dagster_run.tags
        print(f"run of {tags.get('dagster/sensor_name')}: partitions {tags.get('dagster/asset_partition_range_start')}"
              f"..{tags.get('dagster/asset_partition_range_end')}, {r.end_time - r.start_time:.0f} s")
    # Every run came from the daemon's sensors (launched as processes of their own by its code
    # server's run launcher, never in the test's process).
    sensors = {r.tags.get("dagster/sensor_name") for r in instance.get_runs()}
    assert runs_a >= 2 and sensors == {f"{DM}_delta_close_sensor", f"{STREAM}_seal_sensor"}, (runs_a, sensors)

    from resources.spark.session import connect

    spark = connect(remote, catalog)
    layout = LakeLayout(catalog.name)
    for n in want_dm:
        for table in sc.truth[DM][n]:
            want = sorted(sc.truth[DM][n][table].values(),
                          key=lambda r: tuple(r[k] for k in sc.databases[DM].tables[table].primary_key))
            assert rows_as_of(spark, layout, DM, table, n) == want, f"{DM}.{table} as of delta {n}"
    assert judged_qlik_deltas(kafka_bootstrap, ledger, story, spark, layout, STREAM, ledger.sealed_numbers(STREAM)) >= 2

    # Another host: its own folder, DAGSTER_HOME and state_dir; the same PostgreSQL, Kafka, cluster.
    tables = [layout.snapshot(DM, t) for t in sc.truth[DM][want_dm[-1]]]
    before = {t: spark.sql(f"SELECT max(committed_at) FROM {t}.snapshots").first()[0] for t in tables}
    env_b = host(tmp_path / "host-b", kafka_bootstrap, remote, catalog, state_url, dagster_db, topics)
    done = subprocess.run([str(Path(sys.executable).with_name("deltaport")), "sync"], cwd=tmp_path / "host-b",
                          env=env_b, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 delta(s) landed in 0 run(s), 0 failed" in done.stdout, done.stdout
    assert instance.get_runs_count() == runs_a
    assert {t: spark.sql(f"SELECT max(committed_at) FROM {t}.snapshots").first()[0] for t in tables} == before
    assert not (tmp_path / "host-b" / "state" / "index.sqlite").exists()  # nothing local was used
    print(f"multi-host: {runs_a} runs launched by the daemon, {len(want_dm)} datamart and "
          f"{len(ledger.sealed_numbers(STREAM))} stream deltas equal to the truth")

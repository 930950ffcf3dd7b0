"""A lake on object storage behind a REST catalog, end to end (issue 40): an emulated datamart
lands through `sync` in a lake whose catalog is Apache Iceberg's REST catalog server and whose
files are on an S3-compatible store (moto's server), both real servers on loopback started by
the fixtures (tests/integration/conftest.py). Spark writes through Iceberg's S3FileIO
(path-style, an endpoint); PyIceberg reads through the same catalog and store.

At every delta each table equals the emulator's truth, read by Spark and by PyIceberg; every
file of every table is an object in the catalog's bucket and nothing of the lake is on local
disk; `deltaport read` prints the same with both engines; the store's secret key, given as
``{env: NAME}``, appears in no file the run wrote (config folder, state folder, the Dagster
instance's event log, the Spark server's log), in no event of the run, in no `deltaport` output
and in no error text.

Real broker, real Spark, real Iceberg REST server, real S3 API.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import load_config
from platform_assets.definitions import build_definitions
from platform_assets.engine import pyiceberg_tables
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.prostore import LakeLayout
from resources.lake.pyiceberg_rows import datamart_rows
from resources.lake.read import rows_as_of
from tests.support.objstore import SECRET_ENV, list_keys, rest_lake
from tests.support.read_engines import read_with_both_engines

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 3
CATALOG = "s3lake"


@pytest.fixture(scope="module")
def landed(kafka_bootstrap, spark_remote, s3_store, rest_catalog, tmp_path_factory):
    """(scenario, config, Spark session, Dagster instance, sync's output lines) after `sync`
    landed the story one delta per run (a tag per delta) in the REST + S3 lake."""
    sc = build_scenario(EmulatorConfig(seed=41, deltas=DELTAS, datamarts=(DM,), chunk_size=20, ddl_at_delta=1,
                                       faults=Faults(duplicate_rate=0.0)))
    topic = f"objstore.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    root = tmp_path_factory.mktemp("objstore")
    (root / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_store, CATALOG),
        "state_dir": str(root / "state"),
        "sensor": {"max_deltas_per_run": 1},
    }))
    cfg = load_config(str(root / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    lines: list[str] = []
    (root / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
        result = sync(cfg, instance, echo=lines.append)
        assert result.ok and result.landed() == [(DM, n) for n in sorted(sc.truth[DM])], lines
        yield sc, cfg, spark, instance, lines


def test_every_delta_equals_the_truth_read_by_spark_and_by_pyiceberg(landed):
    sc, cfg, spark, _, _ = landed
    layout, open_table = LakeLayout(cfg.lake.catalog), pyiceberg_tables(cfg)
    compared = 0
    for n, tables in sorted(sc.truth[DM].items()):
        for table, state in tables.items():
            key = sc.databases[DM].tables[table].primary_key
            truth = sorted(state.values(), key=lambda r: tuple(r[k] for k in key))
            assert rows_as_of(spark, layout, DM, table, n) == truth, f"spark: {table} as of delta {n}"
            assert datamart_rows(open_table, DM, table, n)[1] == truth, f"pyiceberg: {table} as of delta {n}"
            compared += len(truth)
    assert compared > 20


def test_every_file_is_an_object_in_the_catalogs_bucket(landed, s3_store, rest_catalog):
    sc, cfg, _, _, _ = landed
    bucket, prefix = rest_catalog.warehouse.removeprefix("s3://").split("/", 1)
    keys = set(list_keys(s3_store, bucket, prefix))
    open_table = pyiceberg_tables(cfg)
    for table in sc.truth[DM][max(sc.truth[DM])]:
        lake_table = open_table(f"{DM}.{table}")
        assert lake_table.metadata_location.startswith(f"{rest_catalog.warehouse}/"), lake_table.metadata_location
        files = [task.file.file_path for task in lake_table.scan().plan_files()]
        assert files, table
        for path in [lake_table.metadata_location, *files]:
            assert path.removeprefix(f"s3://{bucket}/") in keys, f"{path} is not in the store"
    local = Path(cfg.source_file).parent
    assert not [p for p in local.rglob("*") if p.suffix in (".parquet", ".avro") or p.name.endswith(".metadata.json")]


def test_read_prints_the_same_with_both_engines(landed, capsys):
    sc, cfg, _, _, _ = landed
    for flags in ([], ["--as-of-delta", "0"], ["--format", "csv", "--as-of-delta", str(max(sc.truth[DM]))]):
        out = read_with_both_engines(cfg.source_file, f"{DM}.stores", flags, capsys)
        assert out.count("\n") > 1


def test_the_secret_key_is_never_written_or_printed(landed, capsys, spark_server_log):
    sc, cfg, _, instance, lines = landed
    secret = os.environ[SECRET_ENV]
    said = "\n".join(lines)
    # an error's text too: a table that does not exist, read with each engine
    for engine in ("spark", "pyiceberg"):
        code = main(["read", f"{DM}.no_such_table", "--engine", engine, "--config", str(cfg.source_file)])
        captured = capsys.readouterr()
        assert code != 0
        said += captured.out + captured.err
    for engine in ("spark", "pyiceberg"):
        main(["read", f"{DM}.stores", "--engine", engine, "--config", str(cfg.source_file)])
        captured = capsys.readouterr()
        said += captured.out + captured.err
    assert secret not in said
    runs = instance.get_runs()
    assert len(runs) == len(sc.truth[DM])
    for run in runs:
        for record in instance.all_logs(run.run_id):
            assert secret not in repr(record), f"run {run.run_id}: an event holds the secret"
        assert secret not in repr(run.run_config) and secret not in repr(run.tags)
    written = [p for p in Path(cfg.source_file).parent.rglob("*") if p.is_file()]
    if spark_server_log is not None:
        written += [p for p in Path(spark_server_log).parent.rglob("*") if p.is_file() and p.suffix != ".jar"]
    assert spark_server_log is None or any(p.name == "spark.json" for p in written)
    leaks = [str(p) for p in written if secret.encode() in p.read_bytes()]
    assert not leaks, f"the secret key is in {leaks}"
    assert len(written) > 10, written

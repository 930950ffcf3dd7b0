"""The lake read without a JVM (issue 28, item 3): tables Spark wrote, read back with PyIceberg.

An emulated datamart (deletes, updates, a table created and one dropped, a column added, one
renamed and one dropped) lands through `sync` one delta per run, so every delta has its tag, on
the embedded Hadoop warehouse and on Iceberg's JDBC catalog on PostgreSQL (the multi-host
catalog). Then every table is read with PyIceberg (resources/lake/pyiceberg_read.py,
resources/lake/pyiceberg_rows.py) as of every delta and as it is now, and compared with Spark's
read of the same table and with the emulator's truth. The snapshot tables are merge-on-read:
the test asserts that PyIceberg's scans did meet position delete files, so the equality covers
them. `deltaport read --engine pyiceberg` prints what the Spark engine prints, and the Python
snippets of docs/using.md ("Reading without a JVM") run on these lakes as printed (the JDBC one
with this database's URL and catalog name put in for the documented ones).

Real broker, real Spark, real Iceberg, real PostgreSQL.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import load_config, resolve_secret
from platform_assets.definitions import build_definitions
from platform_assets.engine import pyiceberg_tables
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.pyiceberg_read import read_current, sqlalchemy_url
from resources.lake.pyiceberg_rows import datamart_rows, last_landed
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of
from tests.support.postgres import PASSWORD_ENV

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 5


@pytest.fixture(scope="module")
def story(kafka_bootstrap):
    sc = build_scenario(EmulatorConfig(seed=29, deltas=DELTAS, datamarts=(DM,), chunk_size=20, ddl_at_delta=2,
                                       column_changes_at_delta=1, faults=Faults(duplicate_rate=0.0)))
    topic = f"pyiceberg.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    return sc, topic


@pytest.fixture(scope="module", params=["hadoop", "jdbc"])
def lake(request, story, kafka_bootstrap, spark_remote, tmp_path_factory):
    """(scenario, config, Spark session) of the story landed in a lake of the param's catalog type."""
    sc, topic = story
    root = tmp_path_factory.mktemp(f"pyice-{request.param}")
    lake = {"catalog": f"pyice_{request.param}", "type": "hadoop", "warehouse": str(root / "lake")}
    if request.param == "jdbc":
        postgres = request.getfixturevalue("postgres")
        db = postgres.database("pyice")
        lake.update(type="jdbc", uri=postgres.jdbc_url(db), properties={
            "jdbc.user": urlparse(postgres.url).username, "jdbc.password": {"env": PASSWORD_ENV}})
    (root / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": lake,
        "state_dir": str(root / "state"),
        "sensor": {"max_deltas_per_run": 1},  # one commit, so one tag, per delta
    }))
    cfg = load_config(str(root / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    with dg.instance_for_test() as instance:
        result = sync(cfg, instance, echo=lambda line: None)
    assert result.ok and result.landed() == [(DM, n) for n in sorted(sc.truth[DM])]
    return sc, cfg, spark


def test_every_table_as_of_every_delta_equals_sparks_read_and_the_truth(lake):
    sc, cfg, spark = lake
    layout, open_table = LakeLayout(cfg.lake.catalog), pyiceberg_tables(cfg)
    compared = 0
    for n, tables in sorted(sc.truth[DM].items()):
        for table, state in tables.items():
            columns, rows = datamart_rows(open_table, DM, table, n)
            spark_rows = rows_as_of(spark, layout, DM, table, n)
            assert rows == spark_rows, f"{table} as of delta {n}"
            assert list(spark_rows[0] if spark_rows else columns) == columns
            key = sc.databases[DM].tables[table].primary_key
            assert rows == sorted(state.values(), key=lambda r: tuple(r[k] for k in key)), f"{table} as of {n}"
            compared += len(rows)
    assert compared > 50
    last = max(sc.truth[DM])
    deletes = 0
    for table in sc.truth[DM][last]:
        assert last_landed(open_table, DM, table) == last
        lake_table = open_table(f"{DM}.{table}")
        deletes += sum(len(task.delete_files) for task in lake_table.scan().plan_files())
        now = read_current(lake_table).to_pylist()  # the whole table: every column it ever had
        assert sorted(map(repr, now)) == sorted(repr(r.asDict()) for r in spark.table(layout.snapshot(DM, table))
                                                .collect()), table
    assert deletes > 0, "no position delete file met: merge-on-read was not exercised"


def test_read_with_the_pyiceberg_engine_prints_what_spark_prints(lake, capsys, tmp_path):
    sc, cfg, _ = lake
    config = str(cfg.source_file)
    table = "stores"  # its columns changed: one added, one renamed, one dropped
    for delta in ([], ["--as-of-delta", "0"], ["--as-of-delta", str(max(sc.truth[DM]))]):
        for fmt in ("jsonl", "csv"):
            out = {}
            for engine in ("spark", "pyiceberg"):
                code = main(["read", f"{DM}.{table}", "--format", fmt, "--engine", engine, "--config", config, *delta])
                out[engine] = capsys.readouterr()
                assert code == 0, out[engine].err[-3000:]
            assert out["pyiceberg"].out == out["spark"].out and out["spark"].out.count("\n") > 1
            assert out["pyiceberg"].err.count("# ") == out["spark"].err.count("# ") == (0 if delta else 1)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "using.md"
DOC_JDBC_URL = "postgresql+psycopg2://deltaport:secret@db.example:5432/lake_catalog"


def doc_snippets() -> dict[str, str]:
    """{fence word after `python` ('' for none): code} of the section's Python blocks."""
    text = DOCS.read_text(encoding="utf-8").split("## Reading without a JVM", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"```python ?(\w*)\n(.*?)```", text, re.S)}


def test_the_docs_snippets_read_the_lake_as_printed(lake, monkeypatch):
    _, cfg, spark = lake
    snippets = doc_snippets()
    assert set(snippets) == {"", "hadoop", "jdbc", "rest"}  # rest: no REST server in the tests
    monkeypatch.chdir(Path(cfg.source_file).parent)  # where deltaport.yaml and the `lake` folder are
    want = spark.table(LakeLayout(cfg.lake.catalog).snapshot(DM, "stores")).count()
    for kind in ("", cfg.lake.type):
        code = snippets[kind]
        if kind == "jdbc":
            assert DOC_JDBC_URL in code and 'SqlCatalog("lake"' in code
            props = {k: str(resolve_secret(v)) for k, v in cfg.lake.properties.items()}
            code = code.replace(DOC_JDBC_URL, sqlalchemy_url(cfg.lake.uri, props)).replace(
                'SqlCatalog("lake"', f'SqlCatalog("{cfg.lake.catalog}"')
        scope: dict = {}
        exec(compile(code, f"docs/using.md python {kind}", "exec"), scope)
        assert read_current(scope["stores"]).num_rows == want > 0, kind
        if kind:
            assert len(scope["df"]) == len([r for r in read_current(scope["stores"]).column("id").to_pylist()
                                            if r >= 2])

"""The rest of the platform on object storage behind a REST catalog (issue 40, item 2): a change
stream lands through `sync`, is exported, and its tables are maintained, in a lake whose catalog
is Iceberg's REST catalog server (started by tests/integration/conftest.py) and whose files are on
gofakes3 (tests/support/disk_s3_server.py) with its clock stood still at `OLD_CLOCK`: every
object it holds is older than the orphan pass's margin of days, as a crashed writer's files are by
the time maintenance comes (moto stamps the time of upload, and Iceberg refuses a margin under 24
hours outside its own tests). A commit fails after its uploads.

The story: a Qlik Replicate stream (duplicates, a rolled-back transaction, a column added), its
first half landed by one `sync`; then the second half's first run fails at its commit: the
catalog server's write of the new ``*.metadata.json`` is refused (500, by a proxy between the
server and the store, tests/support/fault_proxy.py) after Spark uploaded the run's data
files and manifests. The writer cannot know whether that commit landed, so it leaves its files
in the bucket, as a writer killed there does. The next `sync` lands the rest.

* Every sealed delta equals the story's truth (resources/emulator/stream_oracle.py), and each
  increment holds each delta's rows once (what the manifest recorded; a retried append would
  double them).
* `deltaport export` writes every landed delta to Kafka (`inspect`: all complete) and writes
  nothing to the bucket.
* Maintenance on the store, with the platform's own settings but for thresholds low enough to
  act on a small lake: compaction, snapshot expiry, and orphan removal by prefix listing. The
  files no metadata references (the failed commit's among them) are counted in the bucket
  before (> 0) and after (0); the final state still equals the truth.

Real broker, real Spark, real Iceberg REST server, real S3 API.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import load_config
from platform_assets.definitions import build_definitions, ledger_resource
from platform_assets.sync import sync
from resources.changestream.sealing import read_delta
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.stream_oracle import final_truth, row_diff, same_rows, truth_after
from resources.errors import DecodeError
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.cdc import cdc_landed_deltas, cdc_rows_as_of
from resources.lake.maintenance import MaintenanceSettings, maintain_source
from resources.lake.layout import LakeLayout
from tests.support.disk_s3_server import DiskS3Server
from tests.support.fault_proxy import FaultProxy
from tests.support.objstore import list_keys, rest_lake, unreferenced_keys

pytestmark = pytest.mark.integration

SOURCE = "src"
CATALOG = "s3plat"
OLD_CLOCK = "2025-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def s3_store(s3_store, tmp_path_factory):
    """This module's store: gofakes3 with its clock in the past (the session's moto store sets the
    secret variables the lake block names)."""
    with DiskS3Server(tmp_path_factory.mktemp("s3old"), clock=OLD_CLOCK) as server:
        yield server


@pytest.fixture(scope="module")
def commit_proxy(s3_store):
    with FaultProxy(s3_store.endpoint) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def s3_endpoint(commit_proxy) -> str:
    """The REST catalog server reaches the store through the proxy (it writes the metadata
    files, so its writes are where a commit can be made to fail); Spark and PyIceberg do not."""
    return commit_proxy.endpoint


@pytest.fixture(scope="module")
def stream(kafka_bootstrap, s3_store, commit_proxy, rest_catalog, tmp_path_factory):
    """(story, config, Spark session, landed deltas, the failed pass's result) after the story
    landed in two halves, the second half's first commit refused once."""
    story = build_qlik_story(QlikConfig(seed=11, transactions=12, duplicate_rate=0.15))
    topic = f"objstore-qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    half = len(story.messages) // 2
    publish(story.messages[:half], kafka_bootstrap, {QLIK: topic})
    root = tmp_path_factory.mktemp("objstore-platform")
    (root / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": SOURCE, "format": "qlik", "topic": topic, "max_rows": 20, "max_seconds": 3600,
                     "idle_seconds": 0}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_store.endpoint, CATALOG, s3_store),
        "state_dir": str(root / "state"),
        "sensor": {"max_deltas_per_run": 1},
    }))
    cfg = load_config(str(root / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    (root / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed(), first.summary()
        publish(story.messages[half:], kafka_bootstrap, {QLIK: topic})
        commit_proxy.refuse(".metadata.json")
        try:
            failed = sync(cfg, instance, echo=lambda line: None)
        finally:
            commit_proxy.refuse(None)
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok, second.summary()
        landed = [n for _, n in first.landed() + second.landed()]
        yield story, cfg, spark, landed, failed


def test_the_stream_lands_every_delta_once_equal_to_the_truth(stream, kafka_bootstrap, commit_proxy):
    story, cfg, spark, landed, failed = stream
    assert not failed.ok and not failed.landed() and commit_proxy.refused > 0, failed.summary()
    ledger, layout = ledger_resource(cfg).get(), LakeLayout(cfg.lake.catalog)
    assert landed == [d.delta_num for d in ledger.sealed_deltas(SOURCE)] and len(landed) >= 3, landed
    records, compared = [], 0
    for n in landed:
        records += [r for _, rs in read_delta(kafka_bootstrap, ledger, SOURCE, n, QLIK, timeout=20)
                    if not isinstance(rs, DecodeError) for r in rs]
        truth = truth_after(QLIK, story, records, ledger.delta(SOURCE, n).watermark_us)
        if truth is None:  # a delta that ends inside a transaction the oracle cannot cut
            continue
        for table, rows in truth.items():
            if rows:
                diff = row_diff(cdc_rows_as_of(spark, layout, SOURCE, table, n), rows)
                assert not any(diff.values()), f"{table} as of delta {n}: {diff}"
        compared += 1
    assert compared >= 3, compared
    recorded = cdc_landed_deltas(spark, layout, SOURCE)
    assert sorted(recorded) == landed
    for table in {t for tables in recorded.values() for t in tables}:
        want = Counter({n: tables[table].rows for n, tables in recorded.items() if table in tables})
        got = Counter({r["delta_num"]: r["n"] for r in spark.sql(
            f"SELECT delta_num, count(*) AS n FROM {layout.increment(SOURCE, table)} GROUP BY delta_num").collect()})
        assert got == +want, f"{table}: rows per delta"


def test_export_writes_every_landed_delta_to_kafka_and_nothing_to_the_bucket(stream, kafka_bootstrap, s3_store,
                                                                             rest_catalog, capsys):
    _, cfg, _, landed, _ = stream
    bucket = rest_catalog.warehouse.removeprefix("s3://").split("/", 1)[0]
    before = sorted(list_keys(s3_store, bucket))
    exported = f"objstore-export.{os.getpid()}"
    assert main(["export", SOURCE, "--topic", exported, "-c", str(cfg.source_file), "--chunk-size", "5"]) == 0
    capsys.readouterr()
    assert main(["inspect", "--topic", exported, "-b", kafka_bootstrap, "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["backup"]["datamarts"]
    assert report["complete"] == landed and report["incomplete"] == [] and report["missing_deltas"] == []
    assert sorted(list_keys(s3_store, bucket)) == before


def test_maintenance_compacts_expires_and_removes_the_orphans_by_prefix_listing(stream, kafka_bootstrap, s3_store,
                                                                                rest_catalog):
    story, cfg, spark, landed, _ = stream
    bucket = rest_catalog.warehouse.removeprefix("s3://").split("/", 1)[0]
    layout = LakeLayout(cfg.lake.catalog)

    namespaces = [r.namespace for r in spark.sql(f"SHOW NAMESPACES IN {cfg.lake.catalog}").collect()
                  if r.namespace == SOURCE or r.namespace.startswith(f"{SOURCE}_")]
    assert len(namespaces) >= 3, namespaces

    def orphans() -> list[str]:
        return unreferenced_keys(spark, cfg.lake.catalog, namespaces, list_keys(s3_store, bucket), bucket)

    left = orphans()
    assert [k for k in left if k.endswith(".parquet")] and [k for k in left if k.endswith(".avro")], left
    keys_before = len(list_keys(s3_store, bucket))
    done = maintain_source(spark, cfg.lake.catalog, SOURCE, MaintenanceSettings(
        delete_files_threshold=1, data_files_threshold=2, expire_after_seconds=0, orphans=True))
    what = [d for t in done for d in t.done]
    assert any(d == "compacted" for d in what) and any(d.startswith("expired") for d in what), what
    removed = sum(int(d.split()[0]) for d in what if d.endswith("orphan files removed"))
    assert orphans() == [] and removed >= len(left), (removed, left)
    keys_after = len(list_keys(s3_store, bucket))
    assert keys_after < keys_before
    print(f"\norphans in the bucket before maintenance {len(left)} ({sum(k.endswith('.parquet') for k in left)} data "
          f"files), removed {removed}, after 0; objects {keys_before} -> {keys_after}")
    for table, rows in final_truth(QLIK, story).items():
        if rows:
            assert same_rows(cdc_rows_as_of(spark, layout, SOURCE, table, landed[-1]), rows), f"{table} after maintenance"

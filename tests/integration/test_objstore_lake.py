"""A lake on object storage behind a REST catalog, end to end, through a store that fails
(issue 40): an emulated datamart lands through `sync` in a lake whose catalog is Apache Iceberg's
REST catalog server and whose files are on an S3-compatible store (moto's server), both real
servers on loopback started by the fixtures (tests/integration/conftest.py). Spark writes through
Iceberg's S3FileIO (path-style, an endpoint); PyIceberg reads through the same catalog and store.

Every S3 client (Spark's S3FileIO: data files and manifests; the REST server's: table metadata;
PyIceberg) reaches the store through a fault proxy (tests/support/fault_proxy.py) which,
while `sync` lands the story, fails one request in `EVERY`, cycling 503 SlowDown, a reset before
the store sees the request, a reset after the store applied it (the client never hears that its
PUT landed) and a slow answer, `MAX_FAULTS` in all (each costs a retry's backoff; this runs in
`make test`). One story serves every check below, so the faults cost seconds, not another landing.

* Nothing lost: every delta lands in its own run (none needed a second), equal to the emulator's
  truth at every delta, read by Spark and by PyIceberg. Nothing doubled: each increment table holds
  each delta's changes exactly once (a retried append would double them). The proxy counts every
  kind injected, and the clients' retries.
* PyIceberg reads through resets and slow answers. A 503 on a GET is not retried by pyarrow's S3
  client (measured: "AWS Error UNKNOWN (HTTP status 503) during GetObject"), so its reads run
  without 503s (docs/operating.md says so).
* Every file of every table is an object in the catalog's bucket; nothing of the lake is on disk.
* The orphan pass lists the store by prefix (a folder listing fails on s3://) and keeps a young
  orphan.
* `deltaport read` prints the same with both engines.
* The store's secret key and the catalog's OAuth2 credential (the clients get a token from the
  REST server with it), given as ``{env: NAME}``, appear in no file the run wrote (config
  folder, state folder, the Dagster instance's event log, the Spark server's log), in no event of
  the run, in no `deltaport` output and in no error text.

Real broker, real Spark, real Iceberg REST server, real S3 API.
"""

from __future__ import annotations

import os
import time
from collections import Counter
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
from resources.lake.layout import LakeLayout
from resources.lake.maintenance import MaintenanceSettings, maintain_source, maintain_table, table_location
from tests.support.fault_proxy import FAULT_KINDS, FaultProxy
from tests.support.objstore import CREDENTIAL_ENV, SECRET_ENV, list_keys, rest_lake, s3_client
from tests.support.read_engines import every_delta_equals_the_truth, read_with_both_engines

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 2  # delta 1 changes the schema (a table added); each delta is a run (~15 s on 2 busy cores)
CATALOG = "s3lake"
EVERY = 10  # one request in ten fails while the story lands (its ~390 requests: a first delta makes fewer since its tables are made holding their rows) ...
MAX_FAULTS = 32  # ... 8 of each kind
SYNC_SECONDS: list[float] = []  # how long the landing took (printed with the fault figures)


@pytest.fixture(scope="module")
def fault_proxy(s3_store):
    with FaultProxy(s3_store.endpoint, every=EVERY, max_faults=MAX_FAULTS, delay_seconds=0.1) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def s3_endpoint(fault_proxy) -> str:
    """This module's S3 clients, the REST catalog server's included, go through the proxy."""
    return fault_proxy.endpoint


@pytest.fixture(scope="module")
def landed(kafka_bootstrap, spark_remote, s3_endpoint, fault_proxy, rest_catalog, tmp_path_factory):
    """(scenario, config, Spark session, Dagster instance, sync's output lines) after `sync`
    landed the story one delta per run (a tag per delta) in the REST + S3 lake, the proxy armed."""
    sc = build_scenario(EmulatorConfig(seed=41, deltas=DELTAS, datamarts=(DM,), chunk_size=20, ddl_at_delta=1,
                                       faults=Faults(duplicate_rate=0.0)))
    topic = f"objstore.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    root = tmp_path_factory.mktemp("objstore")
    (root / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_endpoint, CATALOG),
        "state_dir": str(root / "state"),
        "sensor": {"max_deltas_per_run": 1},
    }))
    cfg = load_config(str(root / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    lines: list[str] = []
    (root / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
        fault_proxy.arm()
        began = time.monotonic()
        try:
            result = sync(cfg, instance, echo=lines.append)
        finally:
            fault_proxy.disarm()
            SYNC_SECONDS.append(time.monotonic() - began)
        assert result.ok and result.landed() == [(DM, n) for n in sorted(sc.truth[DM])], lines
        yield sc, cfg, spark, instance, lines


def test_every_delta_lands_once_through_the_faults(landed, fault_proxy):
    sc, cfg, spark, instance, _ = landed
    assert len(instance.get_runs()) == len(sc.truth[DM]), "a delta needed a second run"
    for kind in FAULT_KINDS:
        assert fault_proxy.faults[kind] == MAX_FAULTS // len(FAULT_KINDS), dict(fault_proxy.faults)
    retries = fault_proxy.retries()
    assert Counter(kind for kind, *_ in retries)["503"] == fault_proxy.faults["503"], "a 503 was not retried"
    layout = LakeLayout(cfg.lake.catalog)
    for table in sc.truth[DM][max(sc.truth[DM])]:  # each change once: no append applied twice
        want = Counter({n: sum(1 for c in changes if c.table == table) for n, changes in sc.increments[DM].items()})
        got = Counter({r["delta_num"]: r["n"] for r in spark.sql(
            f"SELECT delta_num, count(*) AS n FROM {layout.increment(DM, table)} GROUP BY delta_num").collect()})
        assert got == +want, f"{table}: changes per delta"
    waits = sorted(w for *_, w in retries)
    print(f"\nS3 requests while landing {DELTAS} deltas ({SYNC_SECONDS[0]:.1f} s): {dict(fault_proxy.counts)}; injected "
          f"{dict(fault_proxy.faults)}; retried {len(retries)} (wait median {waits[len(waits) // 2]:.2f} s, "
          f"max {waits[-1]:.2f} s: {max(retries, key=lambda r: r[3])[:2]})")


def test_every_delta_equals_the_truth_read_by_spark_and_by_pyiceberg(landed, fault_proxy):
    sc, cfg, spark, _, _ = landed
    # PyIceberg's reads through resets and slow answers (pyarrow does not retry a 503 on a GET);
    # Spark's too, and it would take the 503s (its writes just did).
    fault_proxy.kinds, fault_proxy.max_faults = ("reset", "reset_after", "delay"), 10**6
    before = sum(fault_proxy.faults.values())
    fault_proxy.arm()
    compared = every_delta_equals_the_truth(sc, cfg, spark, DM)
    fault_proxy.disarm()
    assert compared > 20 and sum(fault_proxy.faults.values()) > before


def test_every_file_is_an_object_in_the_catalogs_bucket(landed, s3_store, rest_catalog):
    # listed at the store itself, not through the proxy
    sc, cfg, _, _, _ = landed
    bucket, prefix = rest_catalog.warehouse.removeprefix("s3://").split("/", 1)
    keys = set(list_keys(s3_store, bucket, prefix))
    open_table = pyiceberg_tables(cfg)
    for table, state in sc.truth[DM][max(sc.truth[DM])].items():
        lake_table = open_table(f"{DM}.{table}")
        assert lake_table.metadata_location.startswith(f"{rest_catalog.warehouse}/"), lake_table.metadata_location
        files = [task.file.file_path for task in lake_table.scan().plan_files()]
        assert bool(files) == bool(state), table  # a table created empty has no data file yet
        for path in [lake_table.metadata_location, *files]:
            assert path.removeprefix(f"s3://{bucket}/") in keys, f"{path} is not in the store"
    local = Path(cfg.source_file).parent
    assert not [p for p in local.rglob("*") if p.suffix in (".parquet", ".avro") or p.name.endswith(".metadata.json")]


def test_the_orphan_pass_lists_the_store_by_prefix_and_keeps_young_files(landed, s3_store, rest_catalog):
    """Orphan removal on object storage lists the table's key prefix through its FileIO (there is
    no s3:// Hadoop file system on the server: a folder listing would fail). A file younger than
    `orphan_age_seconds` is never removed; Iceberg refuses an age under 24 hours, so a young
    orphan (all moto can make) shows the listing and the margin, not a removal."""
    _, cfg, spark, _, _ = landed
    ident = LakeLayout(cfg.lake.catalog).increment(DM, "stores")
    location = table_location(spark, ident)
    bucket, prefix = location.removeprefix("s3://").split("/", 1)
    orphan = f"{prefix}/data/orphan-{os.urandom(4).hex()}.parquet"  # as a killed writer leaves one
    s3_client(s3_store).put_object(Bucket=bucket, Key=orphan, Body=b"PAR1 left by a killed run")
    before = set(list_keys(s3_store, bucket, prefix))
    done = maintain_table(spark, ident, "increment", MaintenanceSettings(orphans=True, expire_after_seconds=10**9))
    assert done is not None and not [d for d in done.done if "orphan" in d], done.done
    assert set(list_keys(s3_store, bucket, prefix)) == before and orphan in before


def test_read_prints_the_same_with_both_engines(landed, capsys):
    sc, cfg, _, _, _ = landed
    for flags in ([], ["--format", "csv", "--as-of-delta", "0"]):
        out = read_with_both_engines(cfg.source_file, f"{DM}.stores", flags, capsys)
        assert out.count("\n") > 1


def test_the_documented_rest_block_reads_the_lake(landed, capsys, s3_endpoint, rest_catalog, tmp_path):
    """docs/operating.md's generic REST `lake:` block, with this test's addresses put in for its
    examples, reads what `sync` wrote (the service's namespaces do not depend on the catalog's name
    in deltaport.yaml)."""
    sc, cfg, _, _, _ = landed
    text = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text(encoding="utf-8")
    block = text.split("### REST, generic", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    lake = yaml.safe_load(block)["lake"]
    assert lake["properties"]["s3.secret-access-key"] == {"env": "LAKE_S3_SECRET"}
    lake.update(uri=rest_catalog.uri, warehouse=rest_catalog.warehouse)
    assert lake["properties"]["credential"] == {"env": "LAKE_CATALOG_CREDENTIAL"}
    lake["properties"].update({"s3.endpoint": s3_endpoint, "s3.secret-access-key": {"env": SECRET_ENV},
                               "s3.access-key-id": cfg.lake.properties["s3.access-key-id"],
                               "credential": {"env": CREDENTIAL_ENV},
                               "oauth2-server-uri": cfg.lake.properties["oauth2-server-uri"]})
    assert lake["properties"].keys() == cfg.lake.properties.keys()
    doc_config = tmp_path / "deltaport.yaml"
    doc_config.write_text(yaml.safe_dump({**yaml.safe_load(Path(cfg.source_file).read_text()), "lake": lake,
                                          "state_dir": str(tmp_path / "state")}))
    table, delta = f"{DM}.stores", ["--as-of-delta", str(max(sc.truth[DM]))]
    want = main(["read", table, "--engine", "pyiceberg", "--config", str(cfg.source_file), *delta]), capsys.readouterr()
    got = main(["read", table, "--engine", "pyiceberg", "--config", str(doc_config), *delta]), capsys.readouterr()
    assert want[0] == got[0] == 0 and got[1].out == want[1].out and want[1].out.count("\n") > 1


def test_the_secret_key_is_never_written_or_printed(landed, capsys, spark_server_log):
    sc, cfg, _, instance, lines = landed
    secrets = (os.environ[SECRET_ENV], os.environ[CREDENTIAL_ENV], os.environ[CREDENTIAL_ENV].split(":", 1)[1])
    said = "\n".join(lines)
    # an error's text too: a table that does not exist, read with each engine
    for engine in ("spark", "pyiceberg"):
        code = main(["read", f"{DM}.no_such_table", "--engine", engine, "--config", str(cfg.source_file)])
        captured = capsys.readouterr()
        assert code != 0
        said += captured.out + captured.err
    # ... and a store that does not answer (a closed port): the read fails, naming no secret
    down = Path(cfg.source_file).parent / "store-down.yaml"
    raw = yaml.safe_load(Path(cfg.source_file).read_text())
    raw["lake"]["properties"]["s3.endpoint"] = "http://127.0.0.1:9"
    down.write_text(yaml.safe_dump(raw))
    code = main(["read", f"{DM}.stores", "--engine", "pyiceberg", "--config", str(down)])
    captured = capsys.readouterr()
    assert code != 0 and "127.0.0.1:9" in captured.err, captured.err[-2000:]
    said += captured.out + captured.err
    for engine in ("spark", "pyiceberg"):
        main(["read", f"{DM}.stores", "--engine", engine, "--config", str(cfg.source_file)])
        captured = capsys.readouterr()
        said += captured.out + captured.err
    assert not [s for s in secrets if s in said]
    runs = instance.get_runs()
    assert len(runs) == len(sc.truth[DM])
    for run in runs:
        for record in instance.all_logs(run.run_id):
            assert not [s for s in secrets if s in repr(record)], f"run {run.run_id}: an event holds a secret"
        assert not [s for s in secrets if s in repr(run.run_config) + repr(run.tags)]
    written = [p for p in Path(cfg.source_file).parent.rglob("*") if p.is_file()]
    if spark_server_log is not None:
        written += [p for p in Path(spark_server_log).parent.rglob("*") if p.is_file() and p.suffix != ".jar"]
    assert spark_server_log is None or any(p.name == "spark.json" for p in written)
    leaks = [str(p) for p in written for s in secrets if s.encode() in p.read_bytes()]
    assert not leaks, f"a secret is in {leaks}"
    assert len(written) > 10, written


def test_a_datamarts_maintenance_on_the_store_keeps_every_delta_exact(landed):
    """Maintenance of a datamart on S3 (the snapshot tables' compaction, their history's, tag
    expiry down to `keep_tags`, snapshot expiry), with thresholds low enough to act on this small
    lake: every delta still reads equal to the truth, by Spark and by PyIceberg."""
    sc, cfg, spark, _, _ = landed
    done = maintain_source(spark, cfg.lake.catalog, DM, MaintenanceSettings(
        delete_files_threshold=1, data_files_threshold=1, expire_after_seconds=0, keep_tags=1))
    what = {d.split()[0] if d[0].isdigit() else d for t in done for d in t.done}
    assert "compacted" in what and any(d.startswith("expired") for d in what), [t.text() for t in done]
    assert every_delta_equals_the_truth(sc, cfg, spark, DM) > 20

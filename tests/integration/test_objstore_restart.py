"""A store killed and restarted in the middle of a run (issue 40, item 4): a datamart lands
through `sync` in a lake behind Iceberg's REST catalog server whose store is gofakes3 with its
on-disk (bolt) backend (tests/support/disk_s3_server.py; moto keeps objects in memory, so a
restart of it is an empty store). While the second delta's run writes, the store is SIGKILLed,
stays down `DOWN_SECONDS`, and comes back on the same port from its file.

* Nothing acknowledged is lost: every object listed before the kill is there after it.
* The run that met the dead store either rode it out on its clients' retries or failed; a
  failed one is landed by the next `sync`, as after any failed run. After recovery every delta
  equals the emulator's truth, read by Spark, and each increment table holds each delta's
  changes exactly once (nothing applied twice). Not by PyIceberg: pyarrow's S3 client rejects
  gofakes3's answers to its ranged reads ("Response checksums mismatch", measured); PyIceberg
  reads the same lake layout on moto in test_objstore_lake.py.

Real broker, real Spark, real Iceberg REST server, a real S3 API on a real disk.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import dagster as dg
import pytest
import yaml

from platform_assets.config import load_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of
from tests.support.disk_s3_server import DiskS3Server
from tests.support.objstore import list_keys, rest_lake

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 2  # the kill falls in the second (last) run
DOWN_SECONDS = 2.0  # long enough that requests meet a closed port, short of the clients' retry budget
KILL_AFTER_SECONDS = 3.0  # into the second delta's run: its writes are under way


@pytest.fixture(scope="module")
def s3_store(s3_store, tmp_path_factory):
    """This module's store, the REST catalog's too: gofakes3 on disk (the session's moto store
    sets the secret variables the lake block names)."""
    with DiskS3Server(tmp_path_factory.mktemp("s3disk")) as server:
        yield server


def _kill_in_second_run(instance, store, killed: dict) -> None:
    """SIGKILL the store `KILL_AFTER_SECONDS` into the second run, and start it again after
    `DOWN_SECONDS`; what was listed just before goes into `killed`."""
    deadline = time.monotonic() + 600
    while len(instance.get_runs()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(KILL_AFTER_SECONDS)
    bucket = killed["bucket"]
    killed["keys_before"] = set(list_keys(store, bucket))
    killed["pid_before"] = store.pid
    store.restart(crash=True, down_seconds=DOWN_SECONDS)
    killed["pid_after"] = store.pid


def test_a_store_killed_mid_run_loses_nothing_and_applies_nothing_twice(kafka_bootstrap, spark_remote, s3_store,
                                                                          rest_catalog, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=43, deltas=DELTAS, datamarts=(DM,), chunk_size=20,
                                       faults=Faults(duplicate_rate=0.0)))
    topic = f"objstore-restart.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    (tmp_path / "deltaport.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": rest_lake(rest_catalog, s3_store.endpoint, "s3disk", s3_store),
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_deltas_per_run": 1},
    }))
    cfg = load_config(str(tmp_path / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    bucket = rest_catalog.warehouse.removeprefix("s3://").split("/", 1)[0]
    killed: dict = {"bucket": bucket}
    lines: list[str] = []
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        killer = threading.Thread(target=_kill_in_second_run, args=(instance, s3_store, killed), daemon=True)
        killer.start()
        first = sync(cfg, instance, echo=lines.append)
        killer.join(timeout=120)
        assert killed.get("pid_after") not in (None, killed["pid_before"]), (killed.keys(), lines)
        landed = first.landed()
        if not first.ok:  # the run that met the dead store failed: the next sync lands it
            second = sync(cfg, instance, echo=lines.append)
            assert second.ok, lines
            landed += second.landed()
    print(f"\nstore killed {KILL_AFTER_SECONDS:.0f} s into the second run, down {DOWN_SECONDS:.0f} s; first sync "
          f"{'rode it out' if first.ok else 'failed a run'}: {lines}")
    assert sorted(landed) == [(DM, n) for n in sorted(sc.truth[DM])], lines
    assert killed["keys_before"] and killed["keys_before"] <= set(list_keys(s3_store, bucket))

    layout = LakeLayout(cfg.lake.catalog)
    for n, tables in sorted(sc.truth[DM].items()):
        for table, state in tables.items():
            key = sc.databases[DM].tables[table].primary_key
            truth = sorted(state.values(), key=lambda r: tuple(r[k] for k in key))
            assert rows_as_of(spark, layout, DM, table, n) == truth, f"{table} as of delta {n}"
    for table in sc.truth[DM][max(sc.truth[DM])]:  # each change once: no append applied twice
        want = Counter({n: sum(1 for c in changes if c.table == table) for n, changes in sc.increments[DM].items()})
        got = Counter({r["delta_num"]: r["n"] for r in spark.sql(
            f"SELECT delta_num, count(*) AS n FROM {layout.increment(DM, table)} GROUP BY delta_num").collect()})
        assert got == +want, f"{table}: changes per delta"

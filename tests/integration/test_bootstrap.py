"""Bootstrap from a snapshot backup: the lake starts at a past delta and goes on live.

Real broker, real Spark, real Iceberg, through `sync`. The live topics (signal and backup) hold
every delta of the story; a snapshot backup of depth 2 as of source delta M = 3 sits in a topic
of its own, renumbered from 0. With `bootstrap: {topic, last_delta: 3}` the lake's first delta
is 1 (the snapshot's state), 2..3 come from the snapshot's history, 4..5 from the live topics;
every one equals the emulator's truth and the live increments of 0..3 are not used. A
last_delta that contradicts the live increment of that delta, and a second snapshot written into
the snapshot topic, each stop the source with a clear reason; nothing lands.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.deltas.partitions import partition_key
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, build_scenario, snapshot_export
from resources.kafka.admin import create_topic
from platform_assets.deltas.topics import topic_key
from resources.lake.layout import LakeLayout
from resources.lake.prostore import landed_deltas
from resources.lake.read import rows_as_of

pytestmark = pytest.mark.integration

DM, LAST = "marketing", 3


def _truth(sc, n, table):
    key = sc.databases[DM].tables[table].primary_key
    return sorted(sc.truth[DM][n][table].values(), key=lambda r: tuple(r[k] for k in key))


def test_a_lake_bootstrapped_from_a_snapshot_goes_on_with_the_live_deltas(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=41, deltas=6, datamarts=(DM,), rows_per_delta=8, ddl_at_delta=1,
                                       chunk_size=5))
    closed = sorted(sc.truth[DM])
    assert closed == list(range(6))
    snapshot, mapping = snapshot_export(sc, DM, depth=2, as_of=LAST)
    assert mapping == {0: 1, 1: 2, 2: 3}
    tag = os.getpid()
    topics = {SIGNAL: f"boot-signal.{tag}", BACKUP: f"boot-backup.{tag}"}
    snap = f"boot-snapshot.{tag}"
    for t in (*topics.values(), snap):
        create_topic(kafka_bootstrap, t)
    publish(sc.messages, kafka_bootstrap, topics)
    publish(snapshot, kafka_bootstrap, {BACKUP: snap})

    def config(last, name):
        return parse_config({
            "sources": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP],
                         "bootstrap": {"topic": snap, "last_delta": last}}],
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "lake": {"catalog": name, "warehouse": str(tmp_path / name)},
            "state_dir": str(tmp_path / f"{name}-state"), "sensor": {"max_deltas_per_run": 10}})

    # A last_delta off by one contradicts the live increment of that delta: refused, nothing lands.
    def per_table(n):
        return {t: sum(1 for c in sc.increments[DM][n] if c.table == t) for t in sc.truth[DM][n]}
    assert per_table(LAST) != per_table(LAST + 1)
    with dg.instance_for_test() as instance:
        wrong = sync(config(LAST + 1, "boot_wrong"), instance, echo=lambda line: None)
        assert wrong.landed() == [] and not wrong.ok
        assert "is not the source delta of the snapshot's last delta" in wrong.failed[DM], wrong.failed

    cfg = config(LAST, "boot")
    defs = build_definitions(cfg)
    graph = defs.resolve_asset_graph()
    assert topic_key(snap) in graph.get(dg.AssetKey([DM, "increment"])).parent_keys  # lineage shows the snapshot

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(1, 6)], first.waiting
        assert instance.get_dynamic_partitions(f"{DM}_deltas") == [partition_key(n) for n in range(1, 6)]
        spark = defs.resources["spark"].get_session()
        layout = LakeLayout(cfg.lake.catalog)
        assert sorted(landed_deltas(spark, layout, DM)) == [1, 2, 3, 4, 5]
        for n in range(1, 6):
            for table in sc.truth[DM][n]:
                assert rows_as_of(spark, layout, DM, table, n) == _truth(sc, n, table), f"{table} as of delta {n}"

        # Another snapshot in the same topic: refused, never merged; nothing lands.
        again, _ = snapshot_export(sc, DM, depth=3, as_of=4)
        publish(again, kafka_bootstrap, {BACKUP: snap})
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.landed() == [] and not second.ok
        assert "will not merge" in second.failed[DM], second.failed

"""A backup-only datamart (no signal topic): deltas land from the backup topic alone, in order.

Real broker, real Spark, real Iceberg; `deltaport sync`'s code path on a test instance. The
emulated backups carry duplicates, a lost chunk re-exported later and a delta held back: the
deltas before the missing one land, the ones after it wait (visibly, in the sync's waiting
reason), and land once it arrives; every delta equals the emulator's truth; the datamart has no
signal_events asset; a second sync finds nothing to do.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of

pytestmark = pytest.mark.integration

DM = "marketing"
HELD = 3  # the delta whose backup arrives last


def _truth(sc, n, table):
    state = sc.truth[DM][n].get(table, {})
    return sorted(state.values(), key=lambda r: tuple(r[k] for k in sc.databases[DM].tables[table].primary_key))


def test_a_backup_only_datamart_lands_every_delta_in_order(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=23, deltas=6, datamarts=(DM,), streams=2, chunk_size=6,
                                       backup_partitions=2, ddl_at_delta=2,
                                       faults=Faults(duplicate_rate=0.1, reexport_deltas=(1,), lost_chunk_deltas=(1,))))
    backups = [m for m in sc.messages if m.role == BACKUP]
    held = [m for m in backups if m.note.startswith(f"{DM}:{HELD}:")]
    assert held, "the story must hold a delta's backup back"
    topic = f"backup-only.{os.getpid()}"
    create_topic(kafka_bootstrap, topic, partitions=2)
    publish([m for m in backups if m not in held], kafka_bootstrap, {BACKUP: topic})

    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "backup_only", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_messages_per_tick": 40, "max_deltas_per_run": 4},  # several ticks before the first delta
    })
    defs = build_definitions(cfg)
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert {f"{DM}/changelog", f"{DM}/increment", f"{DM}/snapshot"} <= keys
    assert f"{DM}/signal_events" not in keys  # nothing to land without a signal topic
    spark = defs.resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)

    def check(deltas):
        for n in deltas:
            for table in sc.truth[DM][n]:
                assert rows_as_of(spark, layout, DM, table, n) == _truth(sc, n, table), f"{table} as of delta {n}"

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(HELD)]
        assert f"delta {HELD} of {DM} is not in {topic} yet (delta {HELD + 1} is)" in first.waiting[DM]
        check(range(HELD))

        publish(held, kafka_bootstrap, {BACKUP: topic})
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok and second.landed() == [(DM, n) for n in range(HELD, 6)]
        assert any(len(o.deltas) > 1 for o in second.outcomes), "the deltas held behind land in a range run"
        check(range(HELD, 6))

        assert sync(cfg, instance, echo=lambda line: None).landed() == []  # nothing twice

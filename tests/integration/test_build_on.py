"""A user's own asset on deltaport (`code:` in deltaport.yaml, `@delta_asset`): it lands with every
delta through the sensor path (`sync`), single-delta and range runs alike, and equals the
emulator's truth as of every delta.

Real broker, real Spark, real Iceberg. The user module is written to the config's folder, as a
team would keep it beside its deltaport.yaml; the asset is the demo's own
(platform_assets/examples/marketing_marts.py), re-exported from there.
"""

from __future__ import annotations

import os
from collections import defaultdict

import dagster as dg
import pytest

from platform_assets.config import ConfigError, parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish

pytestmark = pytest.mark.integration

DM = "marketing"
HELD = 3  # the delta whose backup arrives in the second sync


def _truth(sc, n) -> dict[int, int]:
    units: dict[int, int] = defaultdict(int)
    for row in sc.truth[DM][n].get("sales", {}).values():
        units[row["store_id"]] += row["product_units"]
    return dict(units)


def test_a_user_asset_lands_with_every_delta_and_equals_the_truth(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=31, deltas=5, datamarts=(DM,), streams=1, chunk_size=8,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    backups = [m for m in sc.messages if m.role == BACKUP]
    held = [m for m in backups if m.note.startswith(f"{DM}:{HELD}:")]
    topic = f"build-on.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in backups if m not in held], kafka_bootstrap, {BACKUP: topic})

    module = f"team_marts_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "from platform_assets.examples.marketing_marts import sales_by_store  # noqa: F401\n")
    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "build_on", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_deltas_per_run": 2},  # range runs (0-1, 3-4) and a single-delta run (2)
        "code": [module],
    }, str(tmp_path / "deltaport.yaml"))
    defs = build_definitions(cfg)
    mart = dg.AssetKey([DM, "sales_by_store"])
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey([DM, "snapshot"]) in graph.get(mart).parent_keys  # lineage: snapshot -> mart
    assert mart in defs.resolve_job_def(f"{DM}_delta_job").asset_layer.selected_asset_keys

    spark = defs.resources["spark"].get_session()

    def check(deltas):
        rows = spark.table("build_on.marketing_marts.sales_by_store").collect()
        for n in deltas:
            got = {r["store_id"]: r["product_amount"] for r in rows if r["delta_num"] == n}
            assert got == _truth(sc, n), f"sales_by_store as of delta {n}"

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(HELD)]
        check(range(HELD))
        publish(held, kafka_bootstrap, {BACKUP: topic})
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok and second.landed() == [(DM, n) for n in range(HELD, 5)]
        check(range(5))
        mats = instance.fetch_materializations(mart, limit=100).records
        assert {m.partition_key for m in mats} == {f"{n:08d}" for n in range(5)}


def test_a_user_asset_of_an_unknown_source_is_refused_naming_it(tmp_path):
    module = f"bad_marts_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "from platform_assets.build_on import delta_asset\n"
        "@delta_asset(source='nowhere')\n"
        "def orphan(view):\n"
        "    return None\n")
    cfg = parse_config({"sources": [{"name": DM, "format": "prostore", "backup_topic": "t"}], "code": [module]},
                       str(tmp_path / "deltaport.yaml"))
    with pytest.raises(ConfigError, match="names source 'nowhere'"):
        build_definitions(cfg)

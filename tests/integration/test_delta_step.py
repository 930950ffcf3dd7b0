"""The one step behind a datamart's four assets (platform_assets/prostore/delta_step.py), when
part of it fails and when only some of its assets are selected.

Real broker, Spark and Iceberg; an emulated datamart's deltas run as the sensor requests them.
A failure is injected by making one asset's writer raise deltaport's own error (the rest of
the chain is real): the assets that did not need it land, the step fails naming the asset,
and "increment N landed" (the manifest row) is never written without N's changelog. A subset
(as the UI or a backfill selects it) lands exactly the selected assets, and the snapshot
materialized on its own reads what it needs from the lake.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.prostore import delta_step
from platform_assets.prostore.partitions import partition_key
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.errors import DeltaportError
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.prostore import LakeLayout, landed_deltas
from resources.lake.read import rows_as_of

pytestmark = pytest.mark.integration

DM = "marketing"
ALL = {"signal_events", "changelog", "increment", "snapshot"}


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    """Four closed deltas of one datamart in Kafka, indexed; a platform and an instance."""
    sc = build_scenario(EmulatorConfig(seed=23, deltas=4, datamarts=(DM,), cancel_rate=0.0, ddl_at_delta=None))
    topics = {SIGNAL: f"step.signal.{os.getpid()}", BACKUP: f"step.backup.{os.getpid()}"}
    create_topic(kafka_bootstrap, topics[SIGNAL])
    create_topic(kafka_bootstrap, topics[BACKUP])
    publish(sc.messages, kafka_bootstrap, topics)
    work = tmp_path_factory.mktemp("delta-step")
    cfg = parse_config({
        "datamarts": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "steplake", "warehouse": str(work / "lake")},
        "state_dir": str(work / "state"),
    })
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        sensor = defs.resolve_sensor_def(f"{DM}_delta_close_sensor")
        cursor = None
        for _ in range(6):  # the sensor indexes the topics and adds the deltas' partitions
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                         resources=defs.resources) as ctx:
                result = sensor(ctx)
            for req in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            cursor = result.cursor
        assert len(instance.get_dynamic_partitions(f"{DM}_deltas")) == 4
        yield sc, defs, instance, LakeLayout(cfg.lake.catalog), defs.resources["spark"].get_session()


def run(defs, instance, n: int, assets: set[str] = ALL):
    job = defs.resolve_job_def(f"{DM}_delta_job")
    return job.execute_in_process(partition_key=partition_key(n), instance=instance, raise_on_error=False,
                                  asset_selection=[dg.AssetKey([DM, a]) for a in sorted(assets)])


def materialized(result) -> set[str]:
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def failure_text(result) -> str:
    return next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.to_string()


def equal_to_truth(sc, spark, layout, n: int) -> bool:
    for table, state in sc.truth[DM][n].items():
        pk = sc.databases[DM].tables[table].primary_key
        if rows_as_of(spark, layout, DM, table, n) != sorted(state.values(), key=lambda r: tuple(r[k] for k in pk)):
            return False
    return True


def test_a_changelog_that_fails_keeps_its_delta_unlanded_and_the_next_run_lands_it(platform, monkeypatch):
    sc, defs, instance, layout, spark = platform

    def broken(*args, **kwargs):
        raise DeltaportError("the changelog table refused the commit")

    monkeypatch.setattr(delta_step, "land_changelogs", broken)
    result = run(defs, instance, 0)
    assert not result.success
    text = failure_text(result)
    assert f"{DM}/changelog[0]: the changelog table refused the commit" in text, text
    assert f"{DM}/increment[0]" in text and "manifest was not written" in text, text
    # The increment tables may hold delta 0's rows, but nothing claims it landed: no manifest
    # row, no snapshot; signal_events did not need the changelog and landed.
    assert 0 not in landed_deltas(spark, layout, DM)
    assert materialized(result) == {"signal_events"}
    monkeypatch.undo()
    again = run(defs, instance, 0)
    assert again.success and materialized(again) == ALL
    assert equal_to_truth(sc, spark, layout, 0)


def test_signal_events_that_fail_do_not_stop_the_snapshot_and_fail_the_step(platform, monkeypatch):
    sc, defs, instance, layout, spark = platform
    assert run(defs, instance, 0).success

    def broken(*args, **kwargs):
        raise DeltaportError("signal events refused")

    monkeypatch.setattr(delta_step, "_land_signal_events", broken)
    result = run(defs, instance, 1)
    assert not result.success and f"{DM}/signal_events[1]: signal events refused" in failure_text(result)
    assert materialized(result) == {"changelog", "increment", "snapshot"}
    assert equal_to_truth(sc, spark, layout, 1)


def test_a_subset_lands_only_its_assets_and_the_snapshot_alone_reads_the_lake(platform):
    sc, defs, instance, layout, spark = platform
    assert run(defs, instance, 1).success
    first = run(defs, instance, 2, {"changelog", "increment"})
    assert first.success and materialized(first) == {"changelog", "increment"}
    assert 2 in landed_deltas(spark, layout, DM)
    alone = run(defs, instance, 2, {"snapshot"})
    assert alone.success and materialized(alone) == {"snapshot"}
    assert equal_to_truth(sc, spark, layout, 2)
    assert {c.check_name for c in alone.get_asset_check_evaluations()} == {"primary_key_unique"}

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
from collections import Counter

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.lag import LAG_CHECK
from platform_assets.prostore import delta_step
from platform_assets.deltas.partitions import partition_key
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.errors import DeltaportError
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.layout import LakeLayout
from resources.lake.prostore import landed_deltas
from resources.lake.prostore_history import history_ident
from resources.lake.read import rows_as_of
from tests.support.defs_state import defs_state

pytestmark = pytest.mark.integration

DM = "marketing"
ALL = {"signal_events", "changelog", "increment", "snapshot", "history"}


def ticks(defs, instance, sensor_name: str, count: int) -> None:
    """`count` ticks of the sensor, its cursor carried over and its partitions added; the runs it
    requests are left to the tests."""
    sensor = defs.resolve_sensor_def(sensor_name)
    cursor = None
    for _ in range(count):
        with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                     resources=defs.resources) as ctx:
            result = sensor(ctx)
        for req in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        cursor = result.cursor


def four_deltas_platform(kafka_bootstrap, work, *, seed: int, name: str, lake: dict | None = None):
    """Four closed deltas of one datamart in Kafka (topics named after `name`), indexed; yields
    (scenario, definitions, instance, layout, Spark session). `lake`: settings over the defaults."""
    sc = build_scenario(EmulatorConfig(seed=seed, deltas=4, datamarts=(DM,), cancel_rate=0.0, ddl_at_delta=None))
    topics = {SIGNAL: f"{name}.signal.{os.getpid()}", BACKUP: f"{name}.backup.{os.getpid()}"}
    create_topic(kafka_bootstrap, topics[SIGNAL])
    create_topic(kafka_bootstrap, topics[BACKUP])
    publish(sc.messages, kafka_bootstrap, topics)
    cfg = parse_config({
        "datamarts": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": f"{name}lake", "warehouse": str(work / "lake"), **(lake or {})},
        "state_dir": str(work / "state"),
    })
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        ticks(defs, instance, f"{DM}_delta_close_sensor", 6)  # indexes the topics, adds the deltas
        assert len(instance.get_dynamic_partitions(f"{DM}_deltas")) == 4
        yield sc, defs, instance, LakeLayout(cfg.lake.catalog), defs.resources["spark"].get_session()


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    yield from four_deltas_platform(kafka_bootstrap, tmp_path_factory.mktemp("delta-step"), seed=23, name="step")


def run(defs, instance, n: int, assets: set[str] = ALL):
    job = defs.resolve_job_def(f"{DM}_delta_job")
    return job.execute_in_process(partition_key=partition_key(n), instance=instance, raise_on_error=False,
                                  asset_selection=[dg.AssetKey([DM, a]) for a in sorted(assets)])


def landed_through(defs, instance, n: int) -> None:
    """Deltas 0..n landed whole, each one that the tests before did not land run now: a test
    that builds on the module's story runs alone too (`pytest -k`)."""
    done = instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"]))
    for k in range(n + 1):
        if partition_key(k) not in done:
            assert run(defs, instance, k).success, f"delta {k}, landed before the test, failed"


def checks_of(result) -> set[str]:
    """The step's own checks: a run selecting the snapshot by hand also evaluates lag_within_bound
    (Dagster adds the checks of the assets a run selects; the delta job's own runs leave it to
    the sensor)."""
    return {c.check_name for c in result.get_asset_check_evaluations()} - {LAG_CHECK}


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
    assert materialized(result) == {"changelog", "increment", "snapshot", "history"}
    assert equal_to_truth(sc, spark, layout, 1)


def test_a_subset_lands_only_its_assets_and_the_snapshot_alone_reads_the_lake(platform):
    sc, defs, instance, layout, spark = platform
    landed_through(defs, instance, 0)
    assert run(defs, instance, 1).success
    first = run(defs, instance, 2, {"changelog", "increment"})
    assert first.success and materialized(first) == {"changelog", "increment"}
    assert 2 in landed_deltas(spark, layout, DM)
    refused = run(defs, instance, 2, {"history"})  # its writer is the snapshot's step
    assert not refused.success
    assert "marketing/history is written by marketing/snapshot's step" in failure_text(refused)
    alone = run(defs, instance, 2, {"snapshot"})
    # The snapshot's step wrote the versions delta 2 closed, so history[2] is reported too,
    # though the run did not select it.
    assert alone.success and materialized(alone) == {"snapshot", "history"}
    assert partition_key(2) in instance.get_materialized_partitions(dg.AssetKey([DM, "history"]))
    assert equal_to_truth(sc, spark, layout, 2)
    assert checks_of(alone) == {"primary_key_unique"}
    pk = next(c for c in alone.get_asset_check_evaluations() if c.check_name == "primary_key_unique")
    assert set(pk.metadata["keys_of_deltas"].value.values()) == {"2"}  # the keys of the delta it applied


def test_a_steady_deltas_history_is_written_beside_the_manifest_not_after_it(platform, monkeypatch):
    """The history write of a one-delta run needs only the increment tables and the lake before
    the run, so it goes beside the manifest's commit (early_history.py): with the manifest's
    commit failing, delta 3's history partition is there (harmless: readers bound the history by
    the snapshot's last applied delta, still 2) and the snapshot did not move; the run again
    lands 3, and reads as of 2 (answered by the history) and 3 equal the truth."""
    sc, defs, instance, layout, spark = platform
    landed_through(defs, instance, 2)
    assert 2 in landed_deltas(spark, layout, DM) and 3 not in landed_deltas(spark, layout, DM)

    def broken(*args, **kwargs):
        raise DeltaportError("the manifest refused the commit")

    monkeypatch.setattr(delta_step, "record_increments", broken)
    result = run(defs, instance, 3)
    assert not result.success and "the manifest refused the commit" in failure_text(result)
    assert 3 not in landed_deltas(spark, layout, DM)
    closed = {t: spark.table(history_ident(layout, DM, t)).where("delta_num = 3").count() for t in sc.truth[DM][3]
              if spark.catalog.tableExists(history_ident(layout, DM, t))}
    assert any(closed.values()), closed
    monkeypatch.undo()
    again = run(defs, instance, 3)
    assert again.success and materialized(again) == ALL
    assert equal_to_truth(sc, spark, layout, 3) and equal_to_truth(sc, spark, layout, 2)
    # The step says what it did in one log line: each is an event written to the instance's log.
    said = [e.user_message for e in instance.all_logs(again.run_id) if e.dagster_event is None]
    assert len(said) == 1 and "delta 3: " in said[0] and "snapshot " in said[0], said


def test_history_is_an_asset_after_increment_in_the_lineage(platform):
    _, defs, _, layout, _ = platform
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey([DM, "history"]))
    assert dg.AssetKey([DM, "increment"]) in node.parent_keys
    assert node.partitions_def == graph.get(dg.AssetKey([DM, "snapshot"])).partitions_def
    assert "marketing_history" in node.description


# --- a change-stream source's step (platform_assets/streams/delta_step.py) ------------------

def qlik_story_platform(kafka_bootstrap, work, *, name: str, max_rows: int, ticks_count: int):
    """A Qlik story in Kafka (topic and catalog named after `name`), sealed into deltas of at most
    `max_rows` rows by `ticks_count` ticks of the source's sensor; yields (story, config,
    definitions, instance)."""
    from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story

    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    topic = f"{name}.qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish(story.messages, kafka_bootstrap, {QLIK: topic})
    cfg = parse_config({
        "sources": [{"name": "src", "format": QLIK, "topic": topic, "idle_seconds": 0, "max_rows": max_rows,
                     "max_seconds": 3600}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": f"{name}lake_qlik", "warehouse": str(work / "lake")},
        "state_dir": str(work / "state"),
    })
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        ticks(defs, instance, "src_seal_sensor", ticks_count)  # seals the story into deltas, adds them
        assert len(instance.get_dynamic_partitions("src_deltas")) >= 2
        yield story, cfg, defs, instance


@pytest.fixture(scope="module")
def qlik_platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    """A Qlik story in Kafka, sealed into deltas by the source's sensor; a platform and an instance."""
    yield from qlik_story_platform(kafka_bootstrap, tmp_path_factory.mktemp("stream-step"), name="step",
                                   max_rows=12, ticks_count=4)


def stream_run(defs, instance, n: int, assets=("changelog", "increment", "snapshot", "history")):
    job = defs.resolve_job_def("src_delta_job")
    return job.execute_in_process(partition_key=partition_key(n), instance=instance, raise_on_error=False,
                                  asset_selection=[dg.AssetKey(["src", a]) for a in assets])


def stream_equal_to_truth(kafka_bootstrap, story, cfg, defs, instance, n: int) -> bool:
    """Land deltas n+1.. until the story's oracle can judge one (a delta that ends on a boundary
    it knows), then compare the snapshot as of that delta with the truth for what 0..it hold."""
    from platform_assets.definitions import ledger_resource
    from resources.changestream.sealing import read_delta
    from resources.emulator.qlik import QLIK
    from resources.emulator.stream_oracle import row_diff, truth_after
    from resources.errors import DecodeError
    from resources.lake.cdc import cdc_rows_as_of

    ledger = ledger_resource(cfg).get()
    spark = defs.resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    records = []
    for d in range(len(ledger.sealed_deltas("src"))):
        if d > n:
            assert stream_run(defs, instance, d).success
        records += [r for _, rs in read_delta(kafka_bootstrap, ledger, "src", d, QLIK, timeout=20)
                    if not isinstance(rs, DecodeError) for r in rs]
        truth = truth_after(QLIK, story, records, ledger.delta("src", d).watermark_us)
        if d >= n and truth is not None:
            return not any(any(row_diff(cdc_rows_as_of(spark, layout, "src", t, d), rows).values())
                           for t, rows in truth.items() if rows)
    raise AssertionError("no delta the oracle can judge")


def test_a_stream_changelog_that_fails_keeps_its_delta_unlanded_then_lands(kafka_bootstrap, qlik_platform,
                                                                        monkeypatch):
    from platform_assets.streams import delta_step as stream_step
    from resources.lake.cdc import cdc_landed_deltas

    story, cfg, defs, instance = qlik_platform
    spark = defs.resources["spark"].get_session()

    def broken(*args, **kwargs):
        raise DeltaportError("the changelog table refused the commit")

    monkeypatch.setattr(stream_step, "land_stream_changelogs", broken)
    result = stream_run(defs, instance, 0)
    assert not result.success and materialized(result) == set()
    text = failure_text(result)
    assert "src/changelog[0]: the changelog table refused the commit" in text, text
    assert "src/increment[0]" in text and "manifest was not written" in text, text
    assert 0 not in cdc_landed_deltas(spark, LakeLayout(cfg.lake.catalog), "src")
    monkeypatch.undo()
    again = stream_run(defs, instance, 0)
    assert again.success and materialized(again) == {"changelog", "increment", "snapshot", "history"}
    assert stream_equal_to_truth(kafka_bootstrap, story, cfg, defs, instance, 0)


def test_a_stream_subset_lands_only_its_assets_and_the_snapshot_alone_reads_the_lake(kafka_bootstrap,
                                                                                    qlik_platform):
    story, cfg, defs, instance = qlik_platform
    done = instance.get_materialized_partitions(dg.AssetKey(["src", "snapshot"]))
    n = len(done)  # the first delta no run has landed yet (the test above may have landed some)
    for d in range(n):
        assert partition_key(d) in done
    assert partition_key(n) in instance.get_dynamic_partitions("src_deltas"), "the story has a delta left"
    first = stream_run(defs, instance, n, ("changelog", "increment"))
    assert first.success and materialized(first) == {"changelog", "increment"}
    assert checks_of(first) == {"increment_complete"}
    alone = stream_run(defs, instance, n, ("snapshot",))
    assert alone.success and materialized(alone) == {"snapshot", "history"}
    assert checks_of(alone) == {"key_unique"}
    applied = next(e for e in alone.get_asset_materialization_events() if e.asset_key.path[-1] == "snapshot"
                   ).materialization.metadata["applied_deltas"].value
    assert applied == [n], applied
    assert stream_equal_to_truth(kafka_bootstrap, story, cfg, defs, instance, n)


def test_a_stream_run_between_key_scans_counts_its_rows_from_the_commits(kafka_bootstrap, qlik_platform):
    """`lake.key_check_every_deltas` (10 by default) for a change stream: a run of delta 1-9 does
    not scan for its key check (it says so), and its rows per table, from the commits'
    summaries less the tombstones they record, are what a scan of the live rows counts."""
    from pyspark.sql import functions as F

    story, cfg, defs, instance = qlik_platform
    spark = defs.resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    done = instance.get_materialized_partitions(dg.AssetKey(["src", "snapshot"]))
    n = len(done)  # the next delta to land, if the story has one left; else the last one, again
    if partition_key(n) not in instance.get_dynamic_partitions("src_deltas"):
        n -= 1
    for d in range(1, n):
        if partition_key(d) not in done:
            assert stream_run(defs, instance, d).success
    assert 1 <= n < 10
    result = stream_run(defs, instance, n)
    assert result.success
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "key_unique"]
    assert check.passed and check.metadata["keys_checked"].value.startswith("the run's changes only")
    assert check.metadata["next_scan_at_delta"].value == 10
    mat = next(e.event_specific_data.materialization for e in result.get_asset_materialization_events()
               if e.asset_key == dg.AssetKey(["src", "snapshot"]))
    rows = {k.split("/", 1)[1]: v.value for k, v in mat.metadata.items() if k.startswith("rows/")}
    scanned = {t: spark.table(layout.snapshot("src", t)).where(~F.col("_tombstone")).count() for t in rows}
    assert rows == scanned and any(rows.values()), rows


def test_the_step_keeps_the_datamarts_tables_for_the_catalog(platform):
    """The snapshot's step stores the datamart's tables and columns in the instance's defs state
    storage (platform_assets/lake_tables.py), which the code location lists as assets; a delta
    that leaves them as they were writes no new version."""
    from platform_assets.lake_tables import load_tables, state_key

    sc, defs, instance, layout, spark = platform
    landed_through(defs, instance, 2)
    storage, key = instance.defs_state_storage, state_key(DM)
    before = storage.get_latest_version(key)
    assert before is not None, "no run stored the datamart's tables"
    with defs_state(instance):  # as a code server loads (tests/support/defs_state.py)
        tables = load_tables(DM)
    last = instance.get_latest_materialization_event(dg.AssetKey([DM, "snapshot"])).asset_materialization
    counted = {k.split("/", 1)[1] for k in last.metadata if k.startswith("rows/")}
    assert counted and counted <= set(tables), (sorted(tables), sorted(counted))  # rows/: the tables it read
    for table, columns in tables.items():
        assert spark.catalog.tableExists(layout.snapshot(DM, table)), table
        assert columns and {c for c, _ in columns} <= set(spark.table(layout.snapshot(DM, table)).columns), table
    assert run(defs, instance, 3).success
    with defs_state(instance):
        after = load_tables(DM)
    assert (storage.get_latest_version(key) == before) == (after == tables)


def test_the_stream_step_keeps_its_tables_for_the_catalog(kafka_bootstrap, qlik_platform):
    from platform_assets.lake_tables import load_tables, state_key

    story, cfg, defs, instance = qlik_platform
    if not instance.get_materialized_partitions(dg.AssetKey(["src", "snapshot"])):
        assert stream_run(defs, instance, 0).success
    with defs_state(instance):
        tables = load_tables("src")
    spark = defs.resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    assert tables, "no run stored the source's tables"
    for table, columns in tables.items():
        assert spark.catalog.tableExists(layout.snapshot("src", table)), table
        assert columns and all(kind for _, kind in columns), (table, columns)
    # A later delta keeps every table listed (a run counts only those it read), and stores nothing
    # new unless it added a table or a column.
    key = state_key("src")
    before = instance.defs_state_storage.get_latest_version(key)
    n = len(instance.get_materialized_partitions(dg.AssetKey(["src", "snapshot"])))
    if partition_key(n) in instance.get_dynamic_partitions("src_deltas"):
        assert stream_run(defs, instance, n).success
    with defs_state(instance):
        after = load_tables("src")
    assert set(tables) <= set(after)
    assert (instance.defs_state_storage.get_latest_version(key) == before) == (after == tables)


@pytest.fixture(scope="module")
def fresh_platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    yield from four_deltas_platform(kafka_bootstrap, tmp_path_factory.mktemp("meta-once"), seed=23, name="metaonce")


def test_a_steady_delta_reads_the_meta_tables_before_it_once(fresh_platform, monkeypatch):
    """The manifest and the changelog from the delta before the run on are read once in a step:
    the snapshot's lake read and the increment's look for tables it leaves alone (delta 1 leaves
    `stores` alone, so the increment needs delta 0's rows) share one read (`MetaRead`); each
    read them before."""
    from resources.lake import prostore

    sc, defs, instance, layout, spark = fresh_platform
    landed_through(defs, instance, 0)
    reads = []

    def counted(name, read):
        def counting(*args, since=None, until=None):
            reads.append((name, since, until))
            return read(*args, since=since, until=until)
        return counting

    for name in ("landed_deltas", "changelog_history"):
        wrapper = counted(name, getattr(prostore, name))
        monkeypatch.setattr(prostore, name, wrapper)
        monkeypatch.setattr(delta_step, name, wrapper)
    result = run(defs, instance, 1)
    monkeypatch.undo()
    assert result.success and materialized(result) == ALL
    assert any(s.rows == 0 for s in landed_deltas(spark, layout, DM)[1].values())  # a table left alone
    # Delta 0's rows on: read once each (the increment's side used to read them again, up to delta 0).
    assert Counter(name for name, since, _ in reads if since == 0) == {"landed_deltas": 1, "changelog_history": 1}, reads
    assert equal_to_truth(sc, spark, layout, 1)

"""A window of 2 deltas in Dagster (sensor.partition_window; platform_assets/retirement.py):
every delta still lands, reads exactly and can be landed again, while the instance holds only
the window's partitions, runs and materializations.

Eight deltas of a backup-only datamart, one run each, maintenance (and so retirement) every 2:
- the first `sync` lands deltas 0-5: the partitions, runs and materialized partitions of 0-2
  are gone from the instance, the snapshot says `retired_through` 2;
- every table as of every delta, retired or not, equals the emulator's truth (`deltaport
  read --as-of-delta N`'s own read, and the CLI itself for delta 0);
- `deltaport rerun` of retired delta 1 puts its partition back and lands the same tables;
- the UI's way for retired delta 2 (its partition added back in the backfill dialog, a backfill
  of the datamart's assets: the record the dialog adds, and the run of the implicit asset job
  the backfill daemon launches for it) lands the same tables too;
- with the sync's cursor gone, the next `sync` resumes from the landed mark and lands 6-7 only;
  its retirement sweeps the partitions put back and the backfill's run;
- the instance folder keeps the files (compute logs, event files) of the window's runs only, and
  after the re-runs and the second `sync` no more entries in any of its folders than after the
  first (issue 56: the compute logs of retired runs stayed).

On a PostgreSQL instance (deploy/dagster-postgres.yaml on a throwaway server) a pass deletes the
old partitions, runs and events as on SQLite.

A `sync` SIGKILLed inside a retirement pass loses nothing; the next pass finishes it (the quick
case of bench/fault_retirement.py, which `make faults` runs with two more kill points).

Real broker, real Spark, real Iceberg, through `sync`.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest
import yaml
from dagster._core.execution.backfill import BulkActionStatus

from bench.fault_kills import publish_story
from bench.fault_retirement import DELTAS as RETIREMENT_DELTAS, run_retirement_case
from platform_assets.cli import main
from platform_assets.config import load_config
from platform_assets.definitions import build_definitions
from platform_assets.rerun import rerun
from platform_assets.deltas.partitions import partition_key
from platform_assets.retirement import BACKFILL_TAG, deltas_of_run
from platform_assets.run_files import run_id_of
from platform_assets.deltas.requests import source_tags
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of
from resources.state.cursors import SyncCursors
from resources.state.delta_marks import DeltaMarks, Marks
from resources.state.store import state_store
from tests.support.backfills import add_ui_backfill

pytestmark = pytest.mark.integration

DM = "marketing"
FIRST, DELTAS = 6, 8  # the first sync lands 0..FIRST-1, the second the rest


def _held(instance) -> tuple[list[int], list[int], list[list[int]]]:
    """(partitions, materialized snapshot partitions, each run's deltas) the instance holds."""
    parts = sorted(int(k) for k in instance.get_dynamic_partitions(f"{DM}_deltas"))
    done = sorted(int(k) for k in instance.get_materialized_partitions(dg.AssetKey([DM, "snapshot"])))
    runs = sorted(deltas_of_run(r.tags) for r in instance.get_runs(filters=dg.RunsFilter(tags=source_tags(DM))))
    return parts, done, runs


def _ui_backfill(cfg, instance, delta: int) -> str:
    """A retired delta landed again the UI's way: "Add a partition" in the backfill dialog puts
    its partition back, the dialog adds the backfill's record (the datamart's assets, that
    partition), and the backfill daemon launches its run: the implicit asset job, the backfill's
    assets, its id and the partition as tags. The run's id."""
    defs = build_definitions(cfg)
    # the datamart's assets the dialog can materialize (its lake tables' entries are external: none)
    selection = [key for key in defs.resolve_asset_graph().materializable_asset_keys if key.path[0] == DM]
    key = partition_key(delta)
    instance.add_dynamic_partitions(f"{DM}_deltas", [key])
    backfill = add_ui_backfill(instance, defs.resolve_asset_graph(), "uiwindow", [key], selection,
                               BulkActionStatus.REQUESTED)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=selection, partition_key=key, tags={BACKFILL_TAG: "uiwindow"})
    assert result.success
    instance.update_backfill(backfill.with_status(BulkActionStatus.COMPLETED_SUCCESS))
    return result.run_id


def _entries(instance) -> dict[str, int]:
    """{top-level entry of the instance folder: the files and folders in it, itself included}."""
    root = instance.root_directory
    return {top: 1 + sum(len(dirs) + len(files) for _, dirs, files in os.walk(os.path.join(root, top)))
            for top in sorted(os.listdir(root))}


def _files_of_runs(instance) -> set[str]:
    """The runs the instance folder keeps files of: compute logs (`storage/<run_id>`), event files."""
    names = [*os.listdir(os.path.join(instance.root_directory, "storage")),
             *os.listdir(os.path.join(instance.root_directory, "history", "runs"))]
    return {run_id for name in names if (run_id := run_id_of(name)) is not None}


def _retired_through(instance) -> list[int]:
    records = instance.fetch_observations(dg.AssetKey([DM, "snapshot"]), limit=50).records
    return [r.asset_observation.metadata["retired_through"].value for r in records
            if "retired_through" in r.asset_observation.metadata]


def test_a_window_of_two_deltas_keeps_every_delta_landed_readable_and_rerunnable(spark_remote, kafka_bootstrap,
                                                                                  tmp_path, capsys):
    sc = build_scenario(EmulatorConfig(seed=23, deltas=DELTAS, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    topic = f"window.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    backups = [m for m in sc.messages if m.role == BACKUP]
    later = [m for m in backups if int(m.note.split(":")[1]) >= FIRST]
    publish([m for m in backups if m not in later], kafka_bootstrap, {BACKUP: topic})
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "window", "warehouse": str(tmp_path / "lake"), "maintenance": {"every_deltas": 2}},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_deltas_per_run": 1, "partition_window": 2},
    }))
    cfg = load_config(config)
    spark = build_definitions(cfg).resources["spark"].get_session()
    layout = LakeLayout("window")
    store = state_store(cfg.state_url("index"))
    marks = DeltaMarks(store)

    def exact(n: int) -> None:
        for table, state in sc.truth[DM][n].items():
            key = sc.databases[DM].tables[table].primary_key
            truth = sorted(state.values(), key=lambda r: tuple(r[k] for k in key))
            assert rows_as_of(spark, layout, DM, table, n) == truth, f"{table} as of delta {n}"

    def lake(n: int) -> dict:
        """Every table's rows now and delta n's increment rows: what a re-run of n must leave as is."""
        out = {}
        for table in sc.truth[DM][FIRST - 1]:
            for ident, where in ((layout.snapshot(DM, table), ""), (layout.increment(DM, table), f" WHERE delta_num = {n}")):
                spark.catalog.refreshTable(ident)
                out[ident] = sorted(map(repr, spark.sql(f"SELECT * FROM {ident}{where}").collect()))
        return out

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(FIRST)]
        # runs 2 and 4 retired (every 2 deltas): 0, then 1-2; the window holds 3-5
        assert _held(instance) == ([3, 4, 5], [3, 4, 5], [[3], [4], [5]])
        assert marks.get(DM) == Marks(FIRST - 1, 2)
        # the pass of run 2 said 0, and went with run 2's events when the pass of run 4 deleted that run
        assert _retired_through(instance) == [2]
        # the instance folder keeps the files (compute logs, event files) of the window's runs only
        assert _files_of_runs(instance) == {r.run_id for r in instance.get_runs()}
        window_entries = _entries(instance)

        for n in range(FIRST):
            exact(n)
        table = sorted(sc.truth[DM][0])[0]
        assert main(["read", f"{DM}.{table}", "--as-of-delta", "0", "--format", "jsonl", "--config", str(config)]) == 0
        assert len(capsys.readouterr().out.splitlines()) == len(sc.truth[DM][0][table])

        before = lake(1)
        outcomes = rerun(cfg, instance, DM, 1, 1, echo=lambda line: None)
        assert [(o.deltas, o.success) for o in outcomes] == [([1], True)]
        assert _held(instance)[0] == [1, 3, 4, 5]  # put back; a re-run of old deltas does not retire
        assert lake(1) == before
        exact(1)
        assert marks.get(DM) == Marks(FIRST - 1, 2)

        before = lake(2)
        backfill_run = _ui_backfill(cfg, instance, 2)
        assert _held(instance)[0] == [1, 2, 3, 4, 5] and lake(2) == before
        exact(2)

        publish(later, kafka_bootstrap, {BACKUP: topic})
        SyncCursors(store).put(DM, None)  # no cursor: resume from the landed mark
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok and second.landed() == [(DM, n) for n in range(FIRST, DELTAS)]
        parts, materialized, runs = _held(instance)
        assert parts == [5, 6, 7] and materialized == [5, 6, 7]  # run 6 retired through 4, the re-run's 1 too
        assert runs == [[5], [6], [7]]
        assert marks.get(DM) == Marks(DELTAS - 1, 4) and _retired_through(instance) == [4]
        assert instance.get_run_by_id(backfill_run) is None
        # the re-runs' files went with them: the folder holds what a window of three runs holds
        assert _files_of_runs(instance) == {r.run_id for r in instance.get_runs()}
        entries = _entries(instance)
        assert all(entries[top] <= window_entries.get(top, 0) for top in entries), (window_entries, entries)
    for n in range(FIRST, DELTAS):
        exact(n)


def test_a_sync_killed_inside_retirement_loses_nothing_and_the_next_pass_finishes(spark_remote, kafka_bootstrap,
                                                                                   tmp_path):
    """The quick case of `make faults`' kills during retirement (bench/fault_retirement.py):
    `deltaport sync` SIGKILLed between the two runs a pass deletes, then a second `sync`, both as
    a user runs them (a process each, the instance in the folder's .dagster)."""
    story = publish_story(kafka_bootstrap, seed=29, deltas=RETIREMENT_DELTAS, prefix="window.kill")
    row = run_retirement_case(kafka_bootstrap, spark_remote, story, "kill-retirement-between-runs", tmp_path)
    assert row.killed and row.recovered, row.problems
    # the kill left a run of retired deltas (its index rows gone), the mark behind
    assert row.left_by_kill["retired_through"] == 0 and ([2], "SUCCESS") in row.left_by_kill["runs"], row.left_by_kill
    assert not row.problems, row.problems  # the next pass finished; no delta half-retired; no stray event file
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0)
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and row.survived


def test_on_a_postgresql_instance_a_pass_deletes_the_old_partitions_runs_and_events(postgres, tmp_path, monkeypatch):
    from pathlib import Path

    from platform_assets.retirement import retire
    from tests.unit.test_retirement import SRC, _held as held, _land, check_runs

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text((Path(__file__).parents[2] / "deploy" / "dagster-postgres.yaml").read_text())
    for name, value in postgres.dagster_env(postgres.database("retire")).items():
        monkeypatch.setenv(name, value)
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        for n in range(6):
            _land(instance, n, n, checked=True)
        old = [r.run_id for r in instance.get_runs() if max(deltas_of_run(r.tags)) <= 3]
        done = retire(instance, SRC, marks, 3)
        assert (done.partitions, done.runs, done.through) == (4, 4, 3)
        assert held(instance) == ([4, 5], [4, 5], [[4], [5]])
        assert not any(instance.get_records_for_run(run_id).records for run_id in old)
        assert check_runs(instance) == {r.run_id for r in instance.get_runs()}

"""The partition window (platform_assets/retirement.py, resources/state/delta_marks.py): which
deltas a pass retires, and a pass on a real Dagster instance (no Spark: a stand-in asset of the
same partitions and run tags as a delta run) deletes exactly the old partitions and runs, in
bounded passes that a crash between steps leaves for the next pass to finish. Runs of the UI's
asset backfills (no deltaport tag) are made through the instance with the backfill record and
the tags Dagster gives them."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.execution.backfill import BulkActionStatus

from platform_assets import retirement
from platform_assets.deltas.partitions import delta_partitions, partition_key
from platform_assets.deltas.requests import RANGE_END_TAG, RANGE_START_TAG, source_tags
from platform_assets.retirement import deltas_of_run, partitions_to_delete, retire, retire_through
from resources.state.delta_marks import DeltaMarks, Marks
from tests.support.backfills import add_ui_backfill

SRC = "src"
PARTS = delta_partitions(SRC)


@dg.asset(key=[SRC, "snapshot"], partitions_def=PARTS)
def snapshot(context) -> None:
    pass


@dg.asset_check(asset=snapshot)
def primary_key_unique(context) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


@dg.asset(key=[SRC, "changelog"], partitions_def=PARTS)
def changelog(context) -> None:
    pass


@dg.asset(key=["other", "snapshot"], partitions_def=delta_partitions("other"))
def other_snapshot(context) -> None:
    pass


@dg.asset(key=["other", "changelog"], partitions_def=delta_partitions("other"))
def other_changelog(context) -> None:
    pass


@pytest.mark.parametrize("marks, window, every, run_last, want", [
    (Marks(None, None), 2, 1, 5, None),  # nothing landed
    (Marks(5, None), 0, 1, 5, None),  # no window
    (Marks(5, None), 10, 1, 5, None),  # the window holds everything
    (Marks(9, None), 2, 50, 9, 7),  # a first pass retires at once, whatever `every`
    (Marks(9, 6), 2, 1, 9, 7),
    (Marks(9, 6), 2, 2, 9, None),  # one retirable delta: batched with the next ones
    (Marks(9, 5), 2, 2, 9, 7),
    (Marks(9, None), 2, 1, 4, None),  # a re-run of old deltas does not retire
])
def test_a_pass_retires_up_to_the_window_below_the_landed_delta(marks, window, every, run_last, want):
    assert retire_through(marks, window=window, every=every, run_last=run_last) == want


def test_the_partitions_and_runs_to_retire():
    keys = [partition_key(n) for n in (12, 3, 7, 10, 4)]
    assert partitions_to_delete(keys, 7, 10) == ["00000003", "00000004", "00000007"]
    assert partitions_to_delete(keys, 7, 2) == ["00000003", "00000004"]
    assert deltas_of_run({"dagster/partition": "00000004"}) == [4]
    assert deltas_of_run({RANGE_START_TAG: "00000004", RANGE_END_TAG: "00000006"}) == [4, 5, 6]
    assert deltas_of_run({"deltaport/datamart": SRC}) is None


def test_marks_only_move_forward(tmp_path):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    assert marks.get(SRC) == Marks(None, None)
    marks.landed(SRC, 7)
    marks.landed(SRC, 3)  # a re-run of delta 3 does not say less landed
    marks.retired(SRC, 2)
    marks.retired(SRC, 1)
    assert marks.get(SRC) == Marks(7, 2)
    assert marks.get("other") == Marks(None, None)


def _land(instance, first: int, last: int, *, checked: bool = False) -> None:
    """A delta run of first..last as the sensor or `sync` makes it: the partitions, the run's tags
    (`checked`: with a check's evaluation, as the snapshot's checks)."""
    instance.add_dynamic_partitions(PARTS.name, [partition_key(n) for n in range(first, last + 1)])
    tags = dict(source_tags(SRC))
    if first == last:
        result = dg.materialize([snapshot, *([primary_key_unique] if checked else [])], instance=instance,
                                partition_key=partition_key(first), tags=tags)
    else:
        tags.update({RANGE_START_TAG: partition_key(first), RANGE_END_TAG: partition_key(last)})
        result = dg.materialize([snapshot], instance=instance, tags=tags)
    assert result.success


def _held(instance) -> tuple[list[int], list[int], list[list[int]]]:
    """(partitions, materialized partitions, deltas of each run) the instance holds, in order."""
    parts = sorted(int(k) for k in instance.get_dynamic_partitions(PARTS.name))
    done = sorted(int(k) for k in instance.get_materialized_partitions(dg.AssetKey([SRC, "snapshot"])))
    runs = sorted(deltas_of_run(r.tags) for r in instance.get_runs(filters=dg.RunsFilter(tags=source_tags(SRC))))
    return parts, done, runs


def test_a_pass_deletes_the_old_partitions_and_the_runs_all_of_whose_deltas_are_retired(tmp_path):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.DagsterInstance.ephemeral() as instance:
        for first, last in ((0, 0), (1, 3), (4, 4), (5, 6), (7, 7), (8, 9)):
            _land(instance, first, last)
        marks.landed(SRC, 9)
        done = retire(instance, SRC, marks, 5)
        assert (done.through, done.partitions, done.runs, done.done) == (5, 6, 3, True)
        parts, materialized, runs = _held(instance)
        assert parts == [6, 7, 8, 9]
        # run 5-6 straddles the window's edge: kept, with its events, until delta 6 is retired too
        assert runs == [[5, 6], [7], [8, 9]] and materialized == [5, 6, 7, 8, 9]
        assert marks.get(SRC) == Marks(9, 5)
        again = retire(instance, SRC, marks, 5)  # idempotent
        assert (again.partitions, again.runs) == (0, 0) and _held(instance) == (parts, materialized, runs)


def test_a_pass_is_bounded_and_the_next_one_goes_on(tmp_path):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.DagsterInstance.ephemeral() as instance:
        for n in range(8):
            _land(instance, n, n)
        first = retire(instance, SRC, marks, 5, max_per_pass=4)
        assert (first.through, first.partitions, first.runs, first.done) == (3, 4, 4, False)
        assert marks.get(SRC).retired_through == 3
        second = retire(instance, SRC, marks, 5, max_per_pass=4)
        assert (second.through, second.partitions, second.runs, second.done) == (5, 2, 2, True)
        assert _held(instance) == ([6, 7], [6, 7], [[6], [7]])


def test_a_pass_that_died_after_the_partitions_is_finished_by_the_next(tmp_path, monkeypatch):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.DagsterInstance.ephemeral() as instance:
        for n in range(6):
            _land(instance, n, n)

        def killed(*args, **kwargs):
            raise KeyboardInterrupt("killed between the partitions and the runs")

        with monkeypatch.context() as patch:
            patch.setattr(retirement, "_delete_runs", killed)
            with pytest.raises(KeyboardInterrupt):
                retire(instance, SRC, marks, 3)
        parts, materialized, runs = _held(instance)
        assert parts == [4, 5] and len(runs) == 6 and marks.get(SRC).retired_through is None  # the mark moves last
        done = retire(instance, SRC, marks, 3)
        assert (done.partitions, done.runs, done.through) == (0, 4, 3)
        assert _held(instance) == ([4, 5], [4, 5], [[4], [5]])


def test_on_a_sqlite_instance_a_retired_run_leaves_neither_events_nor_its_files(tmp_path):
    """Nor its compute logs (the local manager's `storage/<run_id>/compute_logs`, which Dagster
    1.13's `delete_run` leaves, issue 56)."""
    marks = DeltaMarks(tmp_path / "index.sqlite")
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        for n in range(3):
            _land(instance, n, n, checked=True)
        shards, logs = tmp_path / "dagster" / "history" / "runs", tmp_path / "dagster" / "storage"
        old = {r.run_id for r in instance.get_runs() if deltas_of_run(r.tags) != [2]}
        assert old <= {p.stem for p in shards.glob("*.db")}
        assert all(any((logs / run_id / "compute_logs").glob("*.complete")) for run_id in old)
        done = retire(instance, SRC, marks, 1)
        assert (done.partitions, done.runs) == (2, 2)
        assert _held(instance) == ([2], [2], [[2]])
        assert not old & {p.stem for p in shards.glob("*.db")}
        kept = {r.run_id for r in instance.get_runs()}
        assert {p.name for p in logs.iterdir()} == kept and {p.stem for p in shards.glob("*-*.db")} == kept
        assert not any(instance.get_records_for_run(run_id).records for run_id in old)
        assert check_runs(instance) == {r.run_id for r in instance.get_runs()}  # the kept run's evaluation only


def check_runs(instance) -> set[str]:
    """The runs of the check executions the instance holds (the check's history in the UI)."""
    history = instance.event_log_storage.get_asset_check_execution_history(primary_key_unique.check_key, limit=100)
    return {record.run_id for record in history}


def _backfill(instance, backfill_id: str, asset, keys: list[str], status: BulkActionStatus) -> None:
    """The record the UI's backfill dialog adds for `keys` of `asset`, in `status`."""
    graph = dg.Definitions(assets=[snapshot, changelog, other_snapshot, other_changelog]).resolve_asset_graph()
    add_ui_backfill(instance, graph, backfill_id, keys, [asset.key], status)


def _backfill_run(instance, backfill_id: str, asset, first: int, last: int) -> str:
    """A run of a backfill as Dagster makes it: the implicit asset job `__ASSET_JOB`, the
    backfill's assets as its selection, tagged with the backfill's id and the partition or the
    range; no deltaport tag."""
    defs = dg.Definitions(assets=[snapshot, changelog, other_snapshot, other_changelog])
    job = defs.resolve_implicit_global_asset_job_def()
    tags = {retirement.BACKFILL_TAG: backfill_id}
    if first == last:
        tags[retirement.PARTITION_TAG] = partition_key(first)
    else:
        tags.update({RANGE_START_TAG: partition_key(first), RANGE_END_TAG: partition_key(last)})
    result = job.execute_in_process(instance=instance, tags=tags, asset_selection=[asset.key])
    assert result.success
    return result.run_id


def test_a_pass_deletes_the_runs_of_ui_backfills_all_of_whose_deltas_are_retired(tmp_path):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.DagsterInstance.ephemeral() as instance:
        for n in range(6):
            _land(instance, n, n)
        instance.add_dynamic_partitions("other_deltas", [partition_key(1)])
        _backfill(instance, "done", snapshot, [partition_key(n) for n in (1, 2, 3, 5)],
                  BulkActionStatus.COMPLETED_SUCCESS)
        retired = [_backfill_run(instance, "done", snapshot, 1, 1), _backfill_run(instance, "done", snapshot, 2, 3)]
        straddling = _backfill_run(instance, "done", snapshot, 3, 5)
        _backfill(instance, "running", snapshot, [partition_key(2)], BulkActionStatus.REQUESTED)
        launching = _backfill_run(instance, "running", snapshot, 2, 2)  # its daemon still reads its runs
        _backfill(instance, "another", other_snapshot, [partition_key(1)], BulkActionStatus.COMPLETED_SUCCESS)
        elsewhere = _backfill_run(instance, "another", other_snapshot, 1, 1)  # another source's deltas

        done = retire(instance, SRC, marks, 3)
        assert (done.partitions, done.runs) == (4, 4 + len(retired))
        kept = {r.run_id for r in instance.get_runs()}
        assert not kept & set(retired)
        assert {straddling, launching, elsewhere} <= kept
        assert _held(instance)[2] == [[4], [5]]
        # the retired deltas' materializations went with the runs; 3-5's run keeps 4 and 5's
        assert sorted(int(k) for k in instance.get_materialized_partitions(dg.AssetKey([SRC, "snapshot"]))) == \
            [2, 3, 4, 5]


def test_a_pass_deletes_the_uis_one_partition_materializations_of_retired_deltas(tmp_path):
    """The asset page's "Materialize" of one partition: a run of the implicit asset job with
    Dagster's partition tag only (no deltaport tag, no backfill)."""
    marks = DeltaMarks(tmp_path / "index.sqlite")
    defs = dg.Definitions(assets=[snapshot, changelog, other_snapshot, other_changelog])
    job = defs.resolve_implicit_global_asset_job_def()

    def materialize(asset, n: int) -> str:
        result = job.execute_in_process(instance=instance, partition_key=partition_key(n), asset_selection=[asset.key])
        assert result.success and result.dagster_run.tags[retirement.PARTITION_TAG] == partition_key(n)
        return result.run_id

    with dg.DagsterInstance.ephemeral() as instance:
        for n in range(6):
            _land(instance, n, n)
        instance.add_dynamic_partitions("other_deltas", [partition_key(n) for n in range(6)])
        retired = [materialize(snapshot, 1), materialize(changelog, 3)]
        kept = [materialize(snapshot, 4), materialize(other_snapshot, 2)]  # after the cutoff; another source's
        done = retire(instance, SRC, marks, 3)
        assert done.runs == 4 + len(retired)
        held = {r.run_id for r in instance.get_runs()}
        assert not held & set(retired) and set(kept) <= held

        # a pass that died after deleting the partitions leaves the runs to the next one
        again = materialize(snapshot, 5)
        _land(instance, 6, 7)
        instance.delete_dynamic_partition(PARTS.name, partition_key(5))
        assert retire(instance, SRC, marks, 5).runs >= 1 and instance.get_run_by_id(again) is None


def test_a_pass_reads_only_the_newest_finished_backfills():
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(PARTS.name, [partition_key(0)])
        for name in ("oldest", "older", "newest"):
            _backfill(instance, name, snapshot, [partition_key(0)], BulkActionStatus.COMPLETED_SUCCESS)
        _backfill(instance, "running", snapshot, [partition_key(0)], BulkActionStatus.REQUESTED)
        assert retirement.source_backfills(instance, SRC, limit=2) == ["newest", "older"]
        assert sorted(retirement.source_backfills(instance, SRC)) == ["newest", "older", "oldest"]

"""A retired run's files (platform_assets/run_files.py) on a real SQLite instance with Dagster's
local compute log manager: a pass killed between a run's files and its record leaves the run for
the next pass; the files of runs the instance no longer holds are swept, oldest first and bounded,
and never those of a run it holds, in flight or not, nor entries that are not a run's."""

from __future__ import annotations

import os
import uuid

import dagster as dg
import pytest
from dagster._core.storage.compute_log_manager import ComputeIOType

from platform_assets import run_files
from platform_assets.retirement import retire
from resources.state.delta_marks import DeltaMarks
from tests.unit.test_retirement import SRC, _held, _land


def _run_entries(home) -> set[str]:
    """The run ids named by the instance folder's per-run entries (compute logs, event files)."""
    names = [*os.listdir(home / "storage"), *os.listdir(home / "history" / "runs")]
    return {run_id for name in names if (run_id := run_files.run_id_of(name)) is not None}


@pytest.fixture
def home(tmp_path):
    (tmp_path / "dagster").mkdir()
    return tmp_path / "dagster"


def test_a_pass_killed_between_a_runs_files_and_its_record_is_finished_by_the_next(home, tmp_path,
                                                                                   monkeypatch):
    marks = DeltaMarks(tmp_path / "index.sqlite")
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        for n in range(4):
            _land(instance, n, n)

        def killed(run_id):
            raise KeyboardInterrupt("killed after the run's files, before its record")

        with monkeypatch.context() as patch:
            patch.setattr(instance.run_storage, "delete_run", killed)
            with pytest.raises(KeyboardInterrupt):
                retire(instance, SRC, marks, 1)
        held = {r.run_id for r in instance.get_runs()}
        assert len(held) == 4 and len(_run_entries(home)) == 3  # the first run's files went, its record stayed
        done = retire(instance, SRC, marks, 1)
        assert (done.runs, _held(instance)[2]) == (2, [[2], [3]])
        assert _run_entries(home) == {r.run_id for r in instance.get_runs()}


def test_the_files_of_runs_no_longer_held_are_swept_never_a_held_runs(home):
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        for n in range(4):
            _land(instance, n, n)
        runs = sorted(instance.get_runs(), key=lambda r: r.tags["dagster/partition"])
        for run in runs[:3]:
            instance.delete_run(run.run_id)  # as Dagster 1.13 (and the UI) delete a run: its files stay
        for age, run in enumerate(runs):  # delta 0's files the oldest
            for path in (home / "storage" / run.run_id, home / "history" / "runs" / f"{run.run_id}.db"):
                os.utime(path, (1_000 + age, 1_000 + age))
        # a run in flight: its record, then its logs as a step writes them
        in_flight = instance.add_run(dg.DagsterRun(job_name="delta_job", run_id=str(uuid.uuid4()),
                                                   status=dg.DagsterRunStatus.STARTED))
        key = [in_flight.run_id, "compute_logs", "step"]
        with instance.compute_log_manager.open_log_stream(key, ComputeIOType.STDOUT) as stream:
            stream.write("half a log")
        os.utime(home / "storage" / in_flight.run_id, (10, 10))  # older than every orphan
        (home / "storage" / SRC).mkdir()  # not a run's: an IO manager's folder
        (home / "storage" / "not-a-run.db").write_text("")

        # the two oldest of each folder: the logs of the run in flight (kept) and of delta 0's run,
        # the event files of delta 0's and 1's runs
        assert run_files.sweep_orphans(instance, limit=2) == 3
        assert not (home / "storage" / runs[0].run_id).exists()
        assert not (home / "history" / "runs" / f"{runs[1].run_id}.db").exists()
        assert (home / "storage" / runs[1].run_id).exists()
        assert run_files.sweep_orphans(instance, limit=100) == 3
        assert _run_entries(home) == {in_flight.run_id, runs[3].run_id}
        assert (home / "storage" / in_flight.run_id / "compute_logs").is_dir()
        assert (home / "storage" / SRC).is_dir() and (home / "storage" / "not-a-run.db").exists()
        assert run_files.sweep_orphans(instance, limit=100) == 0


def test_only_run_ids_name_a_runs_entries():
    run_id = str(uuid.uuid4())
    assert [run_files.run_id_of(n) for n in (run_id, f"{run_id}.db", f"{run_id}.db-wal", f"{run_id}.db-shm")] == \
        [run_id] * 4
    assert [run_files.run_id_of(n) for n in ("index.db", ".db", "runs.db", run_id.upper(), f"{run_id}.txt")] == \
        [None] * 5

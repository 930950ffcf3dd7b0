"""A `sync` killed in the middle of a run leaves that run STARTED: the next sync (holding the
source's lock, so no living sync owns it) fails it, so the sensor's one-run-at-a-time hold does
not keep the source waiting for ever; a run the daemon launched is left to run monitoring."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import dagster as dg

from platform_assets.deltas.requests import run_in_flight, source_tags
from platform_assets.sync import SYNC_HOST_TAG, SYNC_RUN_TAG, fail_orphaned_runs


def _run(instance: dg.DagsterInstance, run_id: str, source: str, tags: dict) -> dg.DagsterRun:
    return instance.add_run(dg.DagsterRun(job_name=f"{source}_delta_job", run_id=run_id,
                                          status=dg.DagsterRunStatus.STARTED, tags={**source_tags(source), **tags}))


def test_the_next_sync_fails_a_dead_syncs_run_and_leaves_the_daemons():
    with dg.instance_for_test() as instance:
        orphan = _run(instance, "a" * 36, "sales", {SYNC_RUN_TAG: "sales:1-2"})
        other_source = _run(instance, "b" * 36, "other", {SYNC_RUN_TAG: "other:1"})
        said = []
        assert fail_orphaned_runs(instance, "sales", echo=said.append) == [orphan.run_id]
        assert instance.get_run_by_id(orphan.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(other_source.run_id).status == dg.DagsterRunStatus.STARTED
        assert run_in_flight(instance, "sales") is None
        assert "run aaaaaaaa (STARTED) of an earlier sync that died marked failed" in said[0]

        daemons = _run(instance, "c" * 36, "sales", {"dagster/run_key": "sales:3"})
        assert fail_orphaned_runs(instance, "sales", echo=said.append) == []
        assert run_in_flight(instance, "sales").run_id == daemons.run_id  # the sensor still waits for it


def _started_by(instance: dg.DagsterInstance, run: dg.DagsterRun, pid: int) -> None:
    instance.report_dagster_event(dg.DagsterEvent(event_type_value="PIPELINE_START", job_name=run.job_name, pid=pid),
                                  run.run_id)


def test_a_run_of_this_host_whose_sync_still_lives_is_left_and_a_dead_ones_failed():
    # The lock can be lost under a living sync (its PostgreSQL connection cut): its run is not an orphan.
    here = {SYNC_RUN_TAG: "sales:1", SYNC_HOST_TAG: socket.gethostname()}
    with dg.instance_for_test() as instance:
        live = _run(instance, "d" * 36, "sales", here)
        _started_by(instance, live, os.getpid())
        assert fail_orphaned_runs(instance, "sales", echo=lambda _: None) == []
        assert instance.get_run_by_id(live.run_id).status == dg.DagsterRunStatus.STARTED

        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        instance.report_run_failed(live)
        dead = _run(instance, "e" * 36, "sales", here)
        _started_by(instance, dead, int(gone.stdout))  # that process has exited
        assert fail_orphaned_runs(instance, "sales", echo=lambda _: None) == [dead.run_id]

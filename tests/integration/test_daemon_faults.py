"""Run workers killed under the Dagster daemon (bench/fault_daemon.py, `make faults`' daemon cases;
`make test` runs the two that kill a run), with the project's dagster.yaml (its run monitoring polled sooner: `MONITORING`): the daemon
lands the whole story with no hand on it, the lake equal to the truth at every delta, nothing
applied twice.

- A run worker SIGKILLed (as the OOM killer does): its code server fails the run, the run retries
  launch it again, run monitoring frees the pool slot the dead step held (without that, the
  retry waited behind it for good).
- The daemon's whole process group SIGKILLed in the middle of a run (its host restarted): nobody
  is left to report the run; the new daemon's run monitoring asks deltaport's launcher, which
  finds the worker gone (before it, the run stayed STARTED and held its datamart for ever).
  It lost its retry once in a fresh clone's `make test` (2026-11-28) to a Dagster race: the
  new daemon's EventLogConsumerDaemon read the RUN_FAILURE event before the run's FAILURE status
  and `will_retry` tag were stored (its `should_retry` skips such a run) and moved its cursor past
  it, so no retry came. The sensor now holds a failed run's later deltas while Dagster's retry is
  due, and requests the run's deltas itself when no retry has come `sensor.retry_after_seconds`
  after the failure (`awaited_retry`; tests/unit/test_range_runs.py): the case is back in `make test`.
  (Before that, it failed twice while the case paused the worker with SIGSTOP inside one of
  Dagster's SQLite writes, holding the instance's lock: now it pauses at `step.phase1_reported`.)
"""

from __future__ import annotations

import pytest

from bench.fault_daemon import run_daemon_case
from bench.fault_kills import publish_story

pytestmark = pytest.mark.integration

# Who failed the killed run, in its RUN_FAILURE message. A worker killed under a live daemon is
# seen by two watchers, whichever comes first: its code server (the process exited on a signal)
# or run monitoring through deltaport's launcher (its pid is gone). A daemon killed with its
# code server leaves run monitoring alone to tell.
WHO_FAILED = {
    "run-worker-killed-under-daemon": ("terminated by signal 9", "the run worker (pid"),
    "daemon-killed-mid-run": ("the run worker (pid",),
}

# The project's run monitoring, polled every 2 s instead of 10 and freeing a dead run's pool slot
# 1 s after its end instead of 5: the same detection, the same freed slot and the same retry (the
# project's run_retries, its launcher), without waiting out production's intervals (~25 s a case).
MONITORING = {"poll_interval_seconds": 2, "free_slots_after_run_end_seconds": 1}


# The cases `make test` runs: `make faults`' daemon cases that kill a run (the mid-tick one kills
# the daemon while no run is in flight: `make faults` only).
IN_MAKE_TEST = ["run-worker-killed-under-daemon", "daemon-killed-mid-run"]


@pytest.mark.parametrize("case", IN_MAKE_TEST)
def test_a_run_worker_killed_under_the_daemon_is_retried_and_lands_everything(spark_remote, kafka_bootstrap,
                                                                               tmp_path, case):
    row = run_daemon_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=3),
                          case, tmp_path, timeout=300, monitoring=MONITORING)
    assert row.killed and row.recovered, "\n".join(row.problems)  # in full: pytest cuts a list's repr
    left = row.left_by_kill
    assert left["failed_runs"] == 1 and left["retries"] >= 1 and left["unfinished_runs"] == 0, left
    assert any(who in left["why_failed"][0] for who in WHO_FAILED[case]), left
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row


def test_a_killed_run_whose_retry_dagster_misses_is_requested_again_by_the_sensor(spark_remote, kafka_bootstrap,
                                                                                  tmp_path):
    """The race in the module docstring, made certain: Dagster's retry consumer reads the event
    log once at the daemon's start and then sleeps, so it never sees the failure. The failed run
    keeps `dagster/will_retry: true` with no retry; the sensor holds the later deltas, then
    requests the failed run's deltas itself (`deltaport/retry_of`), and everything lands once."""
    row = run_daemon_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=3),
                          "run-worker-killed-under-daemon", tmp_path, timeout=300, monitoring=MONITORING,
                          retry_missed=True)
    assert row.killed and row.recovered, "\n".join(row.problems)
    left = row.left_by_kill
    assert left["failed_runs"] == 1 and left["retries"] == 1 and left["unfinished_runs"] == 0, left
    assert left["sensor_retries"] == 1, left
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row

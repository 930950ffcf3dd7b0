"""A run worker SIGKILLed under the Dagster daemon (bench/fault_daemon.py, one of `make faults`'
daemon cases): with the project's dagster.yaml (run retries for crashed runs, run monitoring
freeing the dead run's pool slot), the daemon lands the whole story with no hand on it, the lake
equal to the truth at every delta, nothing applied twice. Before that configuration, the killed
run stayed failed and its deltas were never requested again; the retry then waited for good on
the slot the dead step held."""

from __future__ import annotations

import pytest

from bench.fault_daemon import run_daemon_case
from bench.fault_kills import publish_story

pytestmark = pytest.mark.integration


def test_a_run_worker_killed_under_the_daemon_is_retried_and_lands_everything(spark_remote, kafka_bootstrap,
                                                                               tmp_path):
    row = run_daemon_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=3),
                          "run-worker-killed-under-daemon", tmp_path, timeout=300)
    assert row.killed and row.recovered, row.problems
    assert row.left_by_kill["failed_runs"] == 1 and row.left_by_kill["retries"] >= 1, row.left_by_kill
    assert row.left_by_kill["unfinished_runs"] == 0, row.left_by_kill
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row

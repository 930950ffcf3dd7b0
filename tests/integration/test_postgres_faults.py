"""PostgreSQL restarted under a `deltaport sync` (bench/fault_postgres.py, `make faults`' cases at
two deltas): the state store and the Dagster instance both live on a server of this test's own,
stopped fast (every connection cut) and started again while the sync is paused in a tick, then
in a run. The sync goes on (before the fix it died on the state store's cut connection, with a
psycopg2 traceback); the next sync lands every delta equal to the truth, nothing twice."""

from __future__ import annotations

import pytest

from bench.fault_kills import publish_story
from bench.fault_postgres import POSTGRES_CASES, run_postgres_case
from tests.support.postgres import start_postgres

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_postgres():
    server = start_postgres()  # restarted by the cases: not the session's server
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("case", sorted(POSTGRES_CASES))
def test_postgres_restarted_under_a_sync_loses_nothing(spark_remote, kafka_bootstrap, own_postgres, tmp_path, case):
    row = run_postgres_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=2), case,
                            tmp_path, own_postgres)
    assert row.killed and row.recovered, row.problems
    # It went on: the connections the restart cut were replaced (the state store's) or never kept
    # (the instance's), and the run's events and the cursor were written after it.
    assert row.left_by_kill["first_sync_exit"] == 0, row.left_by_kill
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row
    assert row.survived

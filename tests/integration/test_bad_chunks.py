"""Bad input inside a backlog (issue 31): one bad delta never stops the good deltas before it.

Real broker, real Spark, real Iceberg, `deltaport sync` as a user runs it (bench/fault_bad_chunk.py,
the fault suite's cases at the same size). Five deltas; the changelog of delta 2 creates
`returns` (key id, sale_id) and the only copy of delta 2's `returns` chunk is spoilt; all five
are due at once (one range run, if nothing stopped it):
- the chunk lacks the key column `sale_id`: it is bad input, found before any range is formed
  (its delta's own changelog says the key): quarantined with its coordinates, deltas 0-1 land
  equal to the truth, delta 2 waits and `sync` says so and why, exit 0;
- the chunk has `sale_id`, NULL in every row: only the snapshot's key check finds it, inside the
  range run; `sync` cuts the range, deltas 0-1 land, delta 2 fails alone, named, exit 1.
Then a good re-export of delta 2 arrives and the next sync lands 2-4: every delta equals the
truth, nothing twice.
"""

from __future__ import annotations

import pytest

from bench.fault_bad_chunk import run_bad_chunk_case

pytestmark = pytest.mark.integration


def _converged(row) -> None:
    assert row.second_exit == 0, row.problems
    assert row.lake == {"rows_lost": 0, "rows_duplicated": 0, "increment_rows_extra": 0, "increment_rows_missing": 0,
                        "deltas_applied_twice": 0, "untagged_deltas": 0}, row
    assert not row.problems and row.survived, row


def test_a_chunk_without_a_key_column_waits_and_the_deltas_before_it_land(spark_remote, kafka_bootstrap, tmp_path):
    row = run_bad_chunk_case(kafka_bootstrap, spark_remote, "chunk-without-key-column", tmp_path, seed=11)
    assert row.first_exit == 0, row.problems
    assert row.first_landed == [0, 1], row
    said = row.first_said
    assert "delta 2 " in said and "missing_key_column" in said and "'sale_id'" in said and "offset" in said, said
    assert len(row.quarantined) == 1 and row.quarantined[0].endswith(" missing_key_column"), row.quarantined
    _converged(row)


def test_a_delta_failing_inside_a_range_run_lets_the_deltas_before_it_land(spark_remote, kafka_bootstrap, tmp_path):
    row = run_bad_chunk_case(kafka_bootstrap, spark_remote, "null-key-values-in-range", tmp_path, seed=11)
    assert row.first_exit == 1, row.problems  # a delta failed: said, and the exit code says so
    assert row.first_landed == [0, 1], row
    assert "delta 2: FAILED" in row.first_said and "NULL keys" in row.first_said, row.first_said
    _converged(row)

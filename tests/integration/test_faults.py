"""The fault suite's quick cases (bench/faults.py; `make faults` runs them at full size).

Bad input at scale, smaller: each of the five wire formats gets seeded corruptions mixed into
its emulated story on the real broker, read by the sensor's own code in bounded ticks. Every
message read is accounted for, nothing crashes, every corruption that cannot be valid is
quarantined with its coordinates, and no good message is.
"""

from __future__ import annotations

import pytest

from bench.faults import FORMATS, run_corruption_case

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fmt", FORMATS)
def test_corruptions_are_quarantined_and_the_good_messages_kept(kafka_bootstrap, tmp_path, fmt):
    row = run_corruption_case(kafka_bootstrap, fmt, corruptions=120, seed=3, work=tmp_path, max_messages=100)
    assert row.crashed is None, row.crashed
    assert row.read == row.produced and row.ticks > 2, row  # several bounded ticks, every message read
    assert row.must_fail > 0 and row.must_fail_quarantined == row.must_fail, row
    assert row.good_quarantined == 0 and row.without_location == 0, row
    assert row.survived

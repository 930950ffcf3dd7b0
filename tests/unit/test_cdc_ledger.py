"""The CDC ledger on its own (SQLite, no Kafka): sealed deltas tile, and a sensor lists them cheaply."""

from __future__ import annotations

import pytest

from resources.changestream.ledger import HARD, NONE, CdcLedger, LedgerConflict, Mark, PartitionProgress


def test_sealed_numbers_from_a_cursor(tmp_path):
    ledger = CdcLedger(tmp_path / "ledger.sqlite")
    ledger.register("s", "t", "qlik")
    marks = [Mark(p, o, HARD if o % 2 else NONE, o, o, 1) for p in (0, 1) for o in range(6)]
    ledger.append("s", "t", marks=marks, progress={0: PartitionProgress(6, 0), 1: PartitionProgress(6, 0)})
    for n, end in enumerate((2, 4, 6)):
        starts = {p: pr.sealed_to for p, pr in ledger.progress("s").items()}
        delta = ledger.seal("s", n, {0: end, 1: end}, watermark_us=end, starts=starts, reason="rows")
        assert delta.ranges == {0: (end - 2, end), 1: (end - 2, end)} and delta.rows == 4
    assert ledger.sealed_numbers("s") == [0, 1, 2]
    assert ledger.sealed_numbers("s", 1) == [1, 2] and ledger.sealed_numbers("s", 0, 2) == [0, 1]
    assert ledger.sealed_numbers("s", 3) == [] and ledger.sealed_numbers("other") == []
    # A sealer that read the ledger before it moved writes nothing.
    with pytest.raises(LedgerConflict):
        ledger.seal("s", 2, {0: 6}, watermark_us=9, starts={0: 4, 1: 4})
    assert [d.delta_num for d in ledger.sealed_deltas("s")] == [0, 1, 2]

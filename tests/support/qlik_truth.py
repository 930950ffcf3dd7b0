"""A Qlik source's snapshot tables compared with the emulator's truth, delta by delta: each
sealed delta's records are read back from Kafka, and every delta the oracle can judge (one that
ends on a boundary it knows: resources/emulator/stream_oracle.py) is compared row for row."""

from __future__ import annotations

from resources.changestream.sealing import read_delta
from resources.emulator.qlik import QLIK
from resources.emulator.stream_oracle import row_diff, truth_after
from resources.errors import DecodeError
from resources.lake.cdc import cdc_rows_as_of


def judged_qlik_deltas(kafka_bootstrap, ledger, story, spark, layout, source: str, numbers) -> int:
    """Assert every judgeable delta of `numbers` (the source's sealed deltas from 0 on, in order)
    equals the truth of what deltas 0..it hold; returns how many were judged."""
    records, judged = [], 0
    for n in numbers:
        records += [r for _, rs in read_delta(kafka_bootstrap, ledger, source, n, QLIK, timeout=20)
                    if not isinstance(rs, DecodeError) for r in rs]
        truth = truth_after(QLIK, story, records, ledger.delta(source, n).watermark_us)
        if truth is None:
            continue
        for table, rows in truth.items():
            got = cdc_rows_as_of(spark, layout, source, table, n) if rows else []
            assert not any(row_diff(got, rows).values()), f"{source}.{table} as of delta {n}"
        judged += 1
    return judged

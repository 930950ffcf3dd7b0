"""What a Prostore sensor tick reads of the delta index: the deltas from its cursor on, not the
lake's whole history (a lake lives for years; ~100k deltas a year at a delta every few minutes).

The tick's Kafka reading (`ingest_topic`) and each delta's completeness (`checked_report`) are
replaced by stand-ins: this is the walk's arithmetic on hand-made index answers. The index
stand-in filters by `start` as the real one's SQL does and counts the rows it hands out.
"""

import datetime as dt
from types import SimpleNamespace

import pytest

from platform_assets.config import DatamartConfig
from platform_assets.lag import prostore_lag
from platform_assets.prostore import sensors
from resources.prostore.ingest import IngestResult

HISTORY = 1000  # deltas closed (or in the backup topic) before the tick
NOW = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.timezone.utc)


class CountingIndex:
    def __init__(self, deltas: int):
        self.numbers = list(range(deltas))
        self.rows_read = 0

    def _from(self, start: int) -> list[int]:
        out = [n for n in self.numbers if n >= start]
        self.rows_read += len(out)
        return out

    def deltas(self, datamart, status=None, start=0):
        return {n: {"status": "closed", "delta_date": "2026-11-25T11:00:00", "attempts": 1} for n in self._from(start)}

    def backup_deltas(self, topic, datamart, start=0):
        return self._from(start)

    def backup_delta_arrivals(self, topic, datamart, after=None):
        return {n: 0 for n in self._from(-1 if after is None else after + 1)}


@pytest.fixture
def no_kafka(monkeypatch):
    monkeypatch.setattr(sensors, "ingest_topic", lambda bootstrap, topic, *a, **k: IngestResult(topic))
    monkeypatch.setattr(sensors, "checked_report", lambda *a: SimpleNamespace(complete=True))
    return SimpleNamespace(bootstrap=lambda: "127.0.0.1:9", client_config=lambda: {}, timeout_seconds=1)


@pytest.mark.parametrize("signal_topic", ["m.signal", None], ids=["signal-driven", "backup-only"])
def test_a_tick_reads_the_deltas_from_its_cursor_on(no_kafka, signal_topic):
    dm = DatamartConfig(name="m", backup_topic="m.backup", signal_topic=signal_topic)
    index = CountingIndex(HISTORY)
    due, waiting, cursor, _ = sensors.evaluate(dm, index, no_kafka, {"next": HISTORY - 3}, max_messages=10)
    assert due == [HISTORY - 3, HISTORY - 2, HISTORY - 1] and waiting is None and cursor == {"next": HISTORY}
    assert index.rows_read == 3, f"the tick read {index.rows_read} deltas of the index to request 3"


def test_a_first_tick_reads_every_delta_to_choose_the_first(no_kafka):
    dm = DatamartConfig(name="m", backup_topic="m.backup", signal_topic="m.signal")
    due, _, cursor, _ = sensors.evaluate(dm, CountingIndex(5), no_kafka, {}, max_messages=10)
    assert due == [0, 1, 2, 3, 4] and cursor == {"next": 5}


def test_the_lag_reads_the_deltas_after_the_landed_one():
    dm = DatamartConfig(name="m", backup_topic="m.backup", signal_topic="m.signal")
    index = CountingIndex(HISTORY)
    lag = prostore_lag(dm, index, landed=HISTORY - 3, now=NOW)
    assert (lag.deltas, lag.oldest, lag.seconds) == (2, HISTORY - 2, 3600.0)
    assert index.rows_read == 2, f"the lag read {index.rows_read} deltas of the index to count 2"

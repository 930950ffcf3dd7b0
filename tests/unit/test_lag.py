"""The lag arithmetic (platform_assets/lag.py) on hand-made store answers: which deltas count,
from which time, and what a stream's unsealed messages add."""

import datetime as dt
from types import SimpleNamespace

from platform_assets.lag import prostore_lag, stream_lag, utc

NOW = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.timezone.utc)


def ms(when: str) -> int:
    return int(utc(when).timestamp() * 1000)


class Index:  # the two DeltaIndex queries lag reads
    def __init__(self, closed: dict[int, str], backup: dict[int, int], closed_ms: dict[int, int] | None = None):
        self.closed, self.backup, self.closed_ms = closed, backup, closed_ms or {}

    def deltas(self, datamart, status, start=0):
        return {n: {"delta_date": d, "closed_ms": self.closed_ms.get(n)} for n, d in self.closed.items() if n >= start}

    def backup_delta_arrivals(self, topic, datamart, after=None):
        return {n: d for n, d in self.backup.items() if after is None or n > after}


def test_signal_lag_counts_closed_deltas_after_the_landed_one_from_the_oldest_close_in_kafka():
    february = {3: "2024-02-28T09:00:00", 4: "2024-02-28T09:30:00", 5: "2024-02-28T09:50:00"}
    arrived = {3: ms("2026-11-25T11:00:00"), 4: ms("2026-11-25T11:30:00"), 5: ms("2026-11-25T11:50:00")}
    index = Index(february, {}, arrived)
    dm = SimpleNamespace(name="m", backup_only=False, backup_topic="b")
    lag = prostore_lag(dm, index, landed=3, now=NOW)
    assert (lag.deltas, lag.oldest, lag.seconds) == (2, 4, 1800.0)  # not the 1000 days since their dates
    assert prostore_lag(dm, index, landed=5, now=NOW).seconds == 0.0
    assert prostore_lag(dm, index, landed=None, now=NOW).deltas == 3


def test_a_replayed_delta_is_late_only_for_its_wait_since_it_arrived():
    index = Index({4: "2019-01-01T00:00:00"}, {}, {4: ms("2026-11-25T11:59:30")})
    lag = prostore_lag(SimpleNamespace(name="m", backup_only=False, backup_topic="b"), index, landed=3, now=NOW)
    assert (lag.deltas, lag.seconds) == (1, 30.0)


def test_a_close_indexed_before_its_kafka_time_was_kept_counts_from_its_date():
    index = Index({4: "2026-11-25T11:30:00", 5: "2024-02-28T09:00:00"}, {}, {5: ms("2026-11-25T11:50:00")})
    lag = prostore_lag(SimpleNamespace(name="m", backup_only=False, backup_topic="b"), index, landed=3, now=NOW)
    assert (lag.deltas, lag.oldest, lag.seconds) == (2, 4, 1800.0)


def test_backup_only_lag_counts_from_each_deltas_first_backup_message_in_kafka():
    first = ms("2026-11-25T11:59:00")
    dm = SimpleNamespace(name="m", backup_only=True, backup_topic="b")
    lag = prostore_lag(dm, Index({}, {7: first, 8: first + 30_000}), landed=6, now=NOW)
    assert (lag.deltas, lag.oldest, lag.seconds) == (2, 7, 60.0)


def test_stream_lag_takes_the_older_of_the_oldest_sealed_delta_and_the_unsealed_messages():
    mark = SimpleNamespace(ts_ms=int(dt.datetime(2026, 11, 25, 11, 0, tzinfo=dt.timezone.utc).timestamp() * 1000))
    ledger = SimpleNamespace(
        sealed_numbers=lambda source, start: [n for n in (4, 5) if n >= start],
        delta=lambda source, n: SimpleNamespace(sealed_at="2026-11-25T11:58:00.000+00:00"),
        tail=lambda source: SimpleNamespace(marks={0: [mark, mark]}))
    lag = stream_lag(SimpleNamespace(name="s"), ledger, landed=3, now=NOW)
    assert (lag.deltas, lag.oldest, lag.unsealed_messages, lag.seconds) == (2, 4, 2, 3600.0)
    assert "2 deltas behind (oldest: delta 4), 2 messages not sealed yet, 3600 s" in lag.text()


def test_store_times_are_utc_whatever_their_form():
    eleven = dt.datetime(2026, 11, 25, 11, tzinfo=dt.timezone.utc)
    assert utc("2026-11-25T11:00:00") == utc("2026-11-25T11:00:00+00:00") == utc(int(eleven.timestamp() * 1e6)) == eleven


def test_the_check_passes_up_to_the_bound_and_fails_past_it():
    from platform_assets.lag import LAG_CHECK, Lag, lag_evaluation, lag_events

    lag = Lag("m", deltas=2, seconds=61.0, oldest=4, landed_through=3)
    assert lag_evaluation(lag, 61.0).passed and not lag_evaluation(lag, 60.0).passed
    late = lag_evaluation(lag, 60.0)
    assert (late.check_name, late.asset_key.path, late.metadata["max_lag_seconds"].value) == (LAG_CHECK, ["m", "snapshot"], 60.0)
    assert [type(e).__name__ for e in lag_events(lag, 60.0)] == ["AssetObservation", "AssetCheckEvaluation"]


def test_closes_no_tick_has_read_add_to_the_index_view_from_the_oldest_of_either():
    from resources.kafka.unread import Unread

    index = Index({4: "2024-02-28T09:00:00"}, {}, {4: ms("2026-11-25T11:30:00")})
    dm = SimpleNamespace(name="m", backup_only=False, backup_topic="b")
    unread = Unread("signal", messages=9, unread_beyond_budget=4,
                    closes={3: dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.timezone.utc),  # landed: not counted
                            5: dt.datetime(2026, 11, 25, 11, 40, tzinfo=dt.timezone.utc)})
    lag = prostore_lag(dm, index, landed=3, now=NOW, unread=unread)
    assert (lag.deltas, lag.oldest, lag.seconds, lag.unread) == (2, 4, 1800.0, 4)
    assert lag.text() == ("m: landed through delta 3; 2 deltas behind (oldest: delta 4), "
                          "and 4 more messages not read by this check, 1800 s")


def test_a_streams_unread_messages_count_as_unsealed_from_the_oldest_kafka_time():
    from resources.kafka.unread import Unread

    ledger = SimpleNamespace(sealed_numbers=lambda source, start: [], delta=None,
                             tail=lambda source: SimpleNamespace(marks={}))
    unread = Unread("t", messages=7, oldest=dt.datetime(2026, 11, 25, 11, 59, tzinfo=dt.timezone.utc))
    lag = stream_lag(SimpleNamespace(name="s"), ledger, landed=3, now=NOW, unread=unread)
    assert (lag.deltas, lag.unsealed_messages, lag.seconds) == (0, 7, 60.0)
    assert stream_lag(SimpleNamespace(name="s"), ledger, landed=3, now=NOW).text() == "s: landed through delta 3; up to date"


def test_a_stale_lag_says_so_on_its_line():
    from platform_assets.lag import Lag

    lag = Lag("m", deltas=0, seconds=0.0, oldest=None, landed_through=3, stale="as of the last read (down)")
    assert lag.text() == "m: landed through delta 3; up to date as of the last read (down)"


def test_a_tick_reports_the_lag_only_when_what_it_says_changed():
    from platform_assets.lag import Lag, lag_events_if_changed

    def tick(lag: Lag, cursor: dict) -> tuple[int, dict]:
        events, after = lag_events_if_changed(lag, 60.0, before=cursor, after={"next": 7})
        assert after["next"] == 7  # the tick's own cursor, carried on
        return len(events), after

    behind = Lag("m", deltas=2, seconds=10.0, oldest=5, landed_through=4)
    count, cursor = tick(behind, {})  # no report yet
    assert count == 2
    for seconds in (20.0, 40.0, 60.0):  # only the seconds grow: nothing new to say
        count, cursor = tick(Lag("m", 2, seconds, 5, 4), cursor)
        assert count == 0
    count, cursor = tick(Lag("m", 2, 61.0, 5, 4), cursor)  # past the bound: the check fails now
    assert count == 2
    count, cursor = tick(Lag("m", 0, 0.0, None, 6), cursor)  # landed
    assert count == 2
    count, _ = tick(Lag("m", 0, 0.0, None, 6), cursor)
    assert count == 0

"""The lag's reports kept bounded (platform_assets/lag_reports.py), on a real SQLite instance
(the index, and the runless events' own file) and an in-memory one: the newest stay, the older
go, with their check executions, in bounded calls."""

from __future__ import annotations

import sqlite3

import dagster as dg
import pytest

from platform_assets.lag import LAG_CHECK, Lag, lag_events
from platform_assets.deltas.topic_observations import TopicRead, topic_observations_if_changed
from platform_assets.lag_reports import trim_lag_reports

SRC = "src"


def _report(instance, n: int, source: str = SRC) -> None:
    """The n-th report of a source's lag, as the daemon and `sync` record a tick's."""
    for event in lag_events(Lag(source, deltas=n, seconds=0.0, oldest=None, landed_through=n), 60.0):
        instance.report_runless_asset_event(event)


def _held(instance, source: str = SRC) -> tuple[list[int], int]:
    """(the lag_deltas of the observations held, newest first; the check executions held)."""
    key = dg.AssetKey([source, "snapshot"])
    observations = instance.fetch_observations(key, limit=1000).records
    checks = instance.event_log_storage.get_asset_check_execution_history(dg.AssetCheckKey(key, LAG_CHECK),
                                                                          limit=1000)
    return [r.asset_observation.metadata["lag_deltas"].value for r in observations], len(checks)


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
def test_the_newest_reports_stay_and_the_older_go_in_bounded_calls(tmp_path, kind):
    with (dg.instance_for_test(temp_dir=str(tmp_path)) if kind == "sqlite" else dg.DagsterInstance.ephemeral()) \
            as instance:
        for n in range(30):
            _report(instance, n)
        _report(instance, 7, source="other")
        assert trim_lag_reports(instance, SRC, keep=10, limit=15) == 30  # 15 of each kind: bounded
        assert _held(instance) == (list(range(29, 14, -1)), 15)  # the oldest went first
        assert trim_lag_reports(instance, SRC, keep=10, limit=15) == 10
        assert _held(instance) == (list(range(29, 19, -1)), 10)
        assert trim_lag_reports(instance, SRC, keep=10) == 0  # idempotent
        assert _held(instance, "other") == ([7], 1)  # another source's are its own
        _report(instance, 30)
        assert _held(instance)[0][0] == 30
    if kind == "sqlite":  # the runless events' own file holds only the kept ones too (and the other source's)
        with sqlite3.connect(tmp_path / "history" / "runs" / ".db") as runless:
            held = dict(runless.execute("SELECT dagster_event_type, count(*) FROM event_logs GROUP BY 1").fetchall())
        assert held == {"ASSET_OBSERVATION": 11 + 1, "ASSET_CHECK_EVALUATION": 11 + 1}


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
def test_the_topics_older_observations_go_with_the_lag_reports(tmp_path, kind):
    topic = dg.AssetKey(["kafka", "t"])
    with (dg.instance_for_test(temp_dir=str(tmp_path)) if kind == "sqlite" else dg.DagsterInstance.ephemeral()) \
            as instance:
        for n in range(20):
            # A tick's topic observation and its lag report, recorded one after the other.
            events, _ = topic_observations_if_changed({"t": TopicRead({0: (0, n + 1)}, 0)}, before={}, after={})
            for event in events:
                instance.report_runless_asset_event(event)
            _report(instance, n)
        instance.report_runless_asset_event(dg.AssetObservation(asset_key=dg.AssetKey(["kafka", "other"])))
        assert trim_lag_reports(instance, SRC, keep=5, topics=[topic]) == 3 * 15
        held = [r.asset_observation.metadata["high_water_marks"].value["0"]
                for r in instance.fetch_observations(topic, limit=100).records]
        assert held == list(range(20, 15, -1)) and _held(instance) == (list(range(19, 14, -1)), 5)
        assert len(instance.fetch_observations(dg.AssetKey(["kafka", "other"]), limit=10).records) == 1
    if kind == "sqlite":  # the runless file: the kept ones of each asset, no other asset's lost
        with sqlite3.connect(tmp_path / "history" / "runs" / ".db") as runless:
            held = dict(runless.execute("SELECT dagster_event_type, count(*) FROM event_logs GROUP BY 1").fetchall())
        assert held == {"ASSET_OBSERVATION": 5 + 5 + 1, "ASSET_CHECK_EVALUATION": 5}

"""How many sensor ticks a `sync` pass spends once a source has nothing left to do.

Each tick reads the source's topics and records two lag events in the instance, so a tick that
cannot find anything is pure cost on every `sync`, after every delta. A Prostore tick says how
much it left unread (platform_assets/prostore/sensors.py `_unread`): one tick with nothing to
run and nothing unread has read the topics to their end, and ends the pass. A change stream's
seal sensor says nothing of what it left, so it keeps the old rule: two such ticks in a row."""

from __future__ import annotations

import json

import dagster as dg

from platform_assets.sync import SyncResult, _sync_source, idle_ticks_to_stop


class _Cursors:
    def __init__(self):
        self.saved: dict[str, str] = {}

    def get(self, source):
        return self.saved.get(source)

    def put(self, source, cursor):
        self.saved[source] = cursor


def _ticks(sensor_name: str, cursors: list[dict]) -> int:
    """Run `_sync_source` over a sensor answering `cursors` in turn (nothing to run); its ticks."""
    calls = []

    @dg.op
    def nothing():
        return None

    @dg.job(name="src_delta_job")
    def job():
        nothing()

    @dg.sensor(name=sensor_name, job=job)
    def sensor(context):
        calls.append(context.cursor)
        cursor = cursors[min(len(calls), len(cursors)) - 1]
        return dg.SensorResult(run_requests=[], skip_reason="no new closed delta", cursor=json.dumps(cursor))

    defs = dg.Definitions(jobs=[job], sensors=[sensor])
    with dg.instance_for_test() as instance:
        _sync_source(instance, defs, "src", sensor_name, _Cursors(), SyncResult(), max_ticks=10,
                     echo=lambda _: None, idle_ticks=idle_ticks_to_stop(sensor_name))
    return len(calls)


def test_a_prostore_source_read_through_stops_after_one_idle_tick():
    assert _ticks("src_delta_close_sensor", [{"next": 3}]) == 1


def test_a_prostore_source_with_messages_left_unread_keeps_ticking():
    assert _ticks("src_delta_close_sensor", [{"next": 3, "unread": 500}, {"next": 3, "unread": 20}, {"next": 3}]) == 3


def test_a_change_stream_still_needs_two_idle_ticks():
    assert _ticks("src_seal_sensor", [{"sealed": 1}]) == 2

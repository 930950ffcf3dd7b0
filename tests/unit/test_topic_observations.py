"""The Kafka topics' assets show what the sensor read, recorded only when it changed
(platform_assets/deltas/topic_observations.py), and no internal IO manager key."""

from __future__ import annotations

import dagster as dg

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.deltas.topic_observations import CURSOR_KEY, TopicRead, topic_observations_if_changed


def test_a_topic_is_observed_when_its_marks_or_bad_messages_change_and_only_then():
    reads = {"sig": TopicRead({0: (0, 10)}, 0), "bak": TopicRead({0: (5, 40), 1: (0, 38)}, 1)}
    first, cursor = topic_observations_if_changed(reads, before={}, after={"next": 3})
    assert [e.asset_key for e in first] == [dg.AssetKey(["kafka", "bak"]), dg.AssetKey(["kafka", "sig"])]
    bak = first[0].metadata
    assert bak["high_water_marks"].value == {"0": 40, "1": 38}
    assert bak["messages_held"].value == 73 and bak["bad_messages"].value == 1
    assert cursor["next"] == 3 and CURSOR_KEY in cursor
    # A tick that finds the topics where they were records nothing, and keeps what was said.
    again, cursor2 = topic_observations_if_changed(reads, before=cursor, after={"next": 3})
    assert again == [] and cursor2 == cursor
    # A new delta in the signal topic: that topic alone; a new bad message: that topic alone.
    moved = {**reads, "sig": TopicRead({0: (0, 12)}, 0)}
    events, cursor3 = topic_observations_if_changed(moved, before=cursor2, after={})
    assert [e.asset_key.path[-1] for e in events] == ["sig"]
    worse = {**moved, "bak": TopicRead({0: (5, 40), 1: (0, 38)}, 2)}
    events, _ = topic_observations_if_changed(worse, before=cursor3, after={})
    assert [(e.asset_key.path[-1], e.metadata["bad_messages"].value) for e in events] == [("bak", 2)]


def test_topic_assets_show_no_io_manager_key():
    cfg = parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b"},
                                    {"name": "q", "format": "qlik", "topic": "t"}]})
    nodes = {n.key: n for n in build_definitions(cfg).resolve_asset_graph().asset_nodes}
    for topic in ("s", "b", "t"):
        node = nodes[dg.AssetKey(["kafka", topic])]
        assert "dagster/io_manager_key" not in node.metadata and node.metadata["topic"] == topic

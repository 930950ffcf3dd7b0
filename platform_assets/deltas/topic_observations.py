"""What a sensor read of its Kafka topics, as observations of the topics' assets.

What flows through: per topic a tick read, its watermarks ({partition: (low, high)}, as the
tick's ingestion or sealing read them anyway: no extra call to the broker) and how many of its
messages are quarantined (the delta index's or the ledger's count). What flows out: one
`dg.AssetObservation` of the topic's asset (`kafka/<topic>`) with its high-water marks, the
messages it holds and its bad messages, so the topic's page shows what the platform saw of it.

Guarantees: an observation is recorded only when what it says changed since the source's last
one (the sensor's cursor keeps what was said, as the lag report does): a tick that finds the
topics where they were writes nothing to the instance. A new delta moves its topics' high-water
marks: one observation per topic per tick that sees it move (a Prostore datamart: its signal and
backup topics; a change stream: its topic), whatever the delta's size or the lake's age.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from platform_assets.deltas.topics import topic_key

CURSOR_KEY = "topics"  # where the sensor's cursor keeps what the last observations said


@dataclass(frozen=True)
class TopicRead:
    """One topic as a tick read it: its watermarks and its quarantined messages so far."""

    marks: Mapping[int, tuple[int, int]]
    bad_messages: int


def said(read: TopicRead) -> list:
    """What an observation of `read` says, as the cursor keeps it (JSON)."""
    return [[[p, hi] for p, (_, hi) in sorted(read.marks.items())], read.bad_messages]


def observation(topic: str, read: TopicRead) -> dg.AssetObservation:
    highs = {str(p): hi for p, (_, hi) in sorted(read.marks.items())}
    held = sum(hi - lo for lo, hi in read.marks.values())
    return dg.AssetObservation(asset_key=topic_key(topic), metadata={
        "high_water_marks": highs, "messages_held": held, "bad_messages": read.bad_messages},
        description=f"{held} message(s) held in {len(highs)} partition(s), {read.bad_messages} quarantined")


def topic_observations_if_changed(reads: Mapping[str, TopicRead], *, before: dict,
                                  after: dict) -> tuple[list[dg.AssetObservation], dict]:
    """The tick's topic observations and its new cursor: an observation for each topic whose
    marks or bad messages differ from what `before` (the tick's cursor as it came) last said;
    `after` (the cursor the tick saves) carries what is said now."""
    last = before.get(CURSOR_KEY) or {}
    now = {topic: said(read) for topic, read in sorted(reads.items())}
    events = [observation(topic, reads[topic]) for topic in now if last.get(topic) != now[topic]]
    return events, {**after, CURSOR_KEY: now}

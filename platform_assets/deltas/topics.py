"""The Kafka topics as Dagster assets: the key every source's assets name as their upstream (a
Prostore datamart's signal, backup and snapshot topics, a change stream's topic), so that the
lineage starts at the topic, whichever format reads it."""

from __future__ import annotations

import dagster as dg


def topic_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey(["kafka", topic])

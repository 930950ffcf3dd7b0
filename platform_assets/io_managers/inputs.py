"""What every topic IO manager reads from the consuming step: the deltas its run covers (a
partition, or a partition range of consecutive deltas) and the op's `deltaport/<name>` tags.

What flows through: a Dagster `InputContext` goes in; delta numbers and tag values come out.
Shared by Prostore's IO managers (`prostore`) and the change streams' (`streams`).
"""

from __future__ import annotations

import dagster as dg

__all__ = ["INPUT_TAG_PREFIX", "delta_range", "input_metadata", "run_deltas"]


def delta_range(start_key: str, end_key: str) -> list[int]:
    """The deltas of a partition key range: keys are delta numbers, and a range (from a sensor,
    `sync` or a UI backfill over partitions added in order) covers consecutive ones."""
    return list(range(int(start_key), int(end_key) + 1))


def run_deltas(context: dg.InputContext) -> list[int]:
    """The deltas the consuming step's run covers: its partition, or its partition range. The
    topic is an unpartitioned source asset, so the range comes from the run, not the input."""
    if context.has_partition_key:
        return [int(context.partition_key)]
    keys = context.step_context.partition_key_range
    return delta_range(keys.start, keys.end)


INPUT_TAG_PREFIX = "deltaport/"


def input_metadata(context: dg.InputContext) -> dict:
    """What the consuming op says about this input: its tags `deltaport/<name>`, as {name: value}
    (the assets are multi-assets whose specs also name the topic as a dependency, and Dagster
    refuses metadata on such an AssetIn)."""
    tags = context.op_def.tags or {}
    return {k[len(INPUT_TAG_PREFIX):]: v for k, v in tags.items() if k.startswith(INPUT_TAG_PREFIX)}

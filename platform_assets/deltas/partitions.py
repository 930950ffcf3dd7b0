"""Partitions of a source: one per delta, keys zero-padded so they sort as numbers; a run covers
one delta or a range of consecutive ones."""

from __future__ import annotations

import dagster as dg

from platform_assets.io_managers.inputs import delta_range

KEY_WIDTH = 8


def delta_partitions(datamart: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{datamart}_deltas")


def partition_key(delta_num: int) -> str:
    return f"{delta_num:0{KEY_WIDTH}d}"


def run_deltas(context: dg.AssetExecutionContext) -> list[int]:
    """The deltas of the step's run, in order: one, or a range."""
    keys = context.partition_key_range
    return delta_range(keys.start, keys.end)


def delta_span(slices) -> str:
    """The deltas of a run's slices as text: "7" or "3-7"."""
    first, last = slices[0].delta_num, slices[-1].delta_num
    return str(first) if first == last else f"{first}-{last}"

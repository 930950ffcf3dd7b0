"""Partitions of a Prostore datamart: one per delta, keys zero-padded so they sort as numbers."""

from __future__ import annotations

import dagster as dg

KEY_WIDTH = 8


def delta_partitions(datamart: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{datamart}_deltas")


def partition_key(delta_num: int) -> str:
    return f"{delta_num:0{KEY_WIDTH}d}"


def delta_of(key: str) -> int:
    return int(key)

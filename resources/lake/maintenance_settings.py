"""What table maintenance does and when (resources/lake/maintenance.py): its settings alone, in a
module that imports nothing heavy, so that checking a config (`platform_assets/config.py`, which
every CLI command loads) does not import the Spark side of the lake.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaintenanceSettings:
    every_deltas: int = 50  # a run whose deltas cross a multiple of this maintains its source
    delete_files_threshold: int = 20  # compact a snapshot table holding at least this many delete files ...
    data_files_threshold: int = 50  # ... or this many data files (each MERGE writes a small one)
    expire_after_seconds: float = 3600.0
    keep_tags: int = 100  # a snapshot table with history keeps the delta_<N> tags of its last this many deltas
    orphans: bool = False
    orphan_age_seconds: float = 3 * 24 * 3600.0
    history_sort_order: str = ""  # e.g. "sys_from": compacted history files sorted (default: bin-packed)

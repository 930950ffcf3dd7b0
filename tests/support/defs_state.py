"""An instance's defs state storage in Dagster's context, as a code server and its run workers
have it while definitions load (platform_assets/lake_tables.py reads the lake tables' list there).

Not `with instance:` on an instance a fixture has entered already: Dagster's `__exit__` then
disposes it and drops the fixture's own exit stack, so the storage stays in the context for good,
and once the instance is gone every later definitions load in the process fails on its dead
weakref ("Attempted to resolve undefined DagsterInstance weakref")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from dagster._core.storage.defs_state.base import set_defs_state_storage


@contextmanager
def defs_state(instance: dg.DagsterInstance) -> Iterator[None]:
    with set_defs_state_storage(instance.defs_state_storage):
        yield

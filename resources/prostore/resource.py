"""The delta index as a Dagster resource: written by the datamart sensors, read by the backup and
signal IO managers."""

from __future__ import annotations

from resources.prostore.delta_index import DeltaIndex
from resources.state.resource import StateStoreResource


class DeltaIndexResource(StateStoreResource):
    """Where each delta's messages are, in the state store."""

    url: str = ".deltaport/index.sqlite"

    def get(self) -> DeltaIndex:
        return DeltaIndex(self.store())

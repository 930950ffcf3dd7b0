"""The delta index as a Dagster resource (a SQLite file under the state folder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from resources.delta_index import DeltaIndex


class DeltaIndexResource(dg.ConfigurableResource):
    """Where each delta's messages are: written by the sensors, read by the Kafka IO managers."""

    path: str = Field(default=".deltaport/index.sqlite", description="SQLite file of the delta index.")

    def get(self) -> DeltaIndex:
        return DeltaIndex(Path(self.path))

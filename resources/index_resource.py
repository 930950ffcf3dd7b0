"""The delta index and the CDC ledger as Dagster resources (SQLite files under the state folder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from resources.cdc_ledger import CdcLedger
from resources.delta_index import DeltaIndex


class DeltaIndexResource(dg.ConfigurableResource):
    """Where each delta's messages are: written by the sensors, read by the Kafka IO managers."""

    path: str = Field(default=".deltaport/index.sqlite", description="SQLite file of the delta index.")

    def get(self) -> DeltaIndex:
        return DeltaIndex(Path(self.path))


class CdcLedgerResource(dg.ConfigurableResource):
    """The ledger of sealed deltas of Qlik, DataWorks and Datastream sources: written by their
    sealing sensors, read by the change-topic IO manager (delta N = the same offsets forever)."""

    path: str = Field(default=".deltaport/ledger.sqlite", description="SQLite file of the ledger.")

    def get(self) -> CdcLedger:
        return CdcLedger(Path(self.path))

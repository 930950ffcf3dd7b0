"""The change-stream ledger as a Dagster resource: written by the sealing sensors, read by the
change-topic IO manager (delta N = the same offsets forever)."""

from __future__ import annotations

from resources.changestream.ledger import CdcLedger
from resources.state.resource import StateStoreResource


class CdcLedgerResource(StateStoreResource):
    """The ledger of sealed deltas of Qlik, DataWorks and Datastream sources, in the state store."""

    url: str = ".deltaport/ledger.sqlite"

    def get(self) -> CdcLedger:
        return CdcLedger(self.store())

"""The change-stream ledger as a Dagster resource: written by the sealing sensors, read by the
change-topic IO manager (delta N = the same offsets forever)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from resources.changestream.ledger import CdcLedger
from resources.state.store import STORE_URL_HELP, state_store


class CdcLedgerResource(dg.ConfigurableResource):
    """The ledger of sealed deltas of Qlik, DataWorks and Datastream sources, in the state store."""

    url: str = Field(default=".deltaport/ledger.sqlite", description=STORE_URL_HELP)
    password_env: str | None = Field(default=None, description="Environment variable holding the PostgreSQL "
                                                               "password (read when a connection opens).")

    def get(self) -> CdcLedger:
        return CdcLedger(state_store(self.url, self.password_env))

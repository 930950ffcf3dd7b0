"""The delta index as a Dagster resource: written by the datamart sensors, read by the backup and
signal IO managers."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from resources.prostore.delta_index import DeltaIndex
from resources.state.store import STORE_URL_HELP, state_store


class DeltaIndexResource(dg.ConfigurableResource):
    """Where each delta's messages are, in the state store."""

    url: str = Field(default=".deltaport/index.sqlite", description=STORE_URL_HELP)
    password_env: str | None = Field(default=None, description="Environment variable holding the PostgreSQL "
                                                               "password (read when a connection opens).")

    def get(self) -> DeltaIndex:
        return DeltaIndex(state_store(self.url, self.password_env))

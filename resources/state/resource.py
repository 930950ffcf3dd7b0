"""Where a state store is, as Dagster resource config: the base of the resources of the stores
built on it (the delta index, the change-stream ledger)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from resources.state.store import StateStore, state_store


class StateStoreResource(dg.ConfigurableResource):
    url: str = Field(description="The state store: a SQLite file (one machine), or "
                                 "postgresql://user@host:port/db (several hosts).")
    password_env: str | None = Field(default=None, description="Environment variable holding the PostgreSQL "
                                                               "password (read when a connection opens).")

    def store(self) -> StateStore:
        return state_store(self.url, self.password_env)

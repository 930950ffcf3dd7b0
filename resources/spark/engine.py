"""Which Spark Connect server a deltaport process uses, and a session on it, without Dagster.

In: the engine settings of a deployment (a remote address or none, the embedded server's master,
state folder and extra settings, the Iceberg catalog). Out: a Spark Connect session with the
catalog registered. Order: `remote`, else ``$SPARK_REMOTE`` (read when asked, never at import),
else the embedded server under `state_dir`, started if it is not running (`server.py`).

`SparkResource` (Dagster) and the quick CLI commands (`deltaport read`, `deltaport spark`) share
this, so `read` does not pay for importing Dagster to reach the engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from resources.spark.server import LocalSparkServer, ServerState
from resources.spark.session import CatalogConfig, close_sessions, connect, embedded_server_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["EngineSettings"]

_embedded: dict[str, ServerState] = {}  # state folder -> the embedded server last used


@dataclass(frozen=True)
class EngineSettings:
    remote: str | None = None
    master: str = "local[2]"
    state_dir: str = ".deltaport"
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    conf: Mapping[str, str] = field(default_factory=dict)
    idle_timeout_minutes: float = 60.0  # the embedded server stops itself after this long unused; 0: never

    def remote_url(self) -> str | None:
        """The configured remote engine, or None for the embedded server."""
        return self.remote or os.environ.get("SPARK_REMOTE") or None

    def local_server(self) -> LocalSparkServer:
        """The embedded server of this deployment (whether running or not)."""
        return LocalSparkServer(self.state_dir, embedded_server_conf(
            master=self.master, catalog=self.catalog, conf=self.conf), idle_timeout=self.idle_timeout_minutes * 60)

    def session(self) -> SparkSession:
        """A session on the engine (the embedded server started first if it is not running; a
        session of a server that has since restarted is replaced). Raises `DeltaportError`s."""
        url = self.remote_url()
        if url:
            return connect(url, self.catalog)
        state = self.local_server().ensure()
        previous = _embedded.get(self.state_dir)
        if previous is not None and previous.identity != state.identity:
            close_sessions(previous.url, release=False)  # they died with their server
        _embedded[self.state_dir] = state
        return connect(state.url, self.catalog, incarnation=state.identity)

"""`SparkResource`: the Dagster face of the Spark engine (Spark Connect + one Iceberg catalog).

Every step, sensor and CLI command reaches Spark through Spark Connect: a thin client session
(gRPC, no JVM in the run process) to one long-lived server. Which server, in this order:
`remote` (any ``sc://`` endpoint: a user's cluster), else ``$SPARK_REMOTE``, else the embedded
local server recorded under `state_dir`, started on the first use if it is not running
(`resources.spark.server`). So a step costs a connection, not a JVM start, and the second
run of a deployment finds the engine warm.

The session is created lazily, on the first `get_session()`, so a step that never touches
Spark never even connects. Why not dagster-pyspark's `PySparkResource`: it builds a classic
in-process session with ``getOrCreate()``; ours needs the embedded server's life cycle and a
catalog described by typed fields, registered per session.

Errors from reaching the engine (Maven, pyspark version, the server's start, catalog config)
are translated at this boundary into `dg.Failure` with the cause in the metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import dagster as dg
from pydantic import Field

from resources.errors import DeltaportError
from resources.spark.engine import EngineSettings
from resources.spark.server import LocalSparkServer
from resources.spark.session import CatalogConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkResource"]


class SparkResource(dg.ConfigurableResource):
    """Spark through Spark Connect, with Apache Iceberg and one Iceberg catalog."""

    remote: str | None = Field(
        default=None,
        description="Spark Connect address (sc://host:15002) of a running server with Iceberg. Empty: "
        "$SPARK_REMOTE, else the embedded local server (started on demand, see `deltaport spark`).",
    )
    master: str = Field(default="local[2]", description="Master of the embedded server: local[N] or spark://host:7077.")
    state_dir: str = Field(default=".deltaport", description="Where the embedded server records its address and log.")
    catalog_name: str = Field(
        default="lake",
        description="Name of the Iceberg catalog in Spark SQL (tables are <catalog>.<namespace>.<table>).",
    )
    catalog_type: Literal["hadoop", "rest", "jdbc", "hive"] = Field(
        default="hadoop", description="Iceberg catalog implementation: hadoop (files only), rest, jdbc or hive."
    )
    warehouse: str | None = Field(
        default="./lake",
        description="Warehouse folder or URI (s3://..., file:/...). A relative path is made absolute "
        "from the working directory when the session is built.",
    )
    catalog_uri: str | None = Field(
        default=None, description="REST endpoint, JDBC URL or Hive metastore URI (not used by hadoop)."
    )
    catalog_properties: dict[str, str] = Field(
        default_factory=dict,
        description="Other Iceberg catalog properties (io-impl, s3.endpoint, ...), "
        "set as spark.sql.catalog.<name>.<key>.",
    )
    catalog_secret_properties: dict[str, str] = Field(
        default_factory=dict,
        description="Catalog properties whose values are secrets: property -> environment variable "
        "holding it (e.g. jdbc.password: LAKE_DB_PASSWORD), read when a session is built.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra settings of the embedded server; they win over deltaport's small-machine "
        "defaults. spark.jars and spark.sql.extensions given here are added to Iceberg's.",
    )

    idle_timeout_minutes: float = Field(
        default=60.0, ge=0,
        description="The embedded server (when this resource starts it) stops itself after this many minutes "
        "with no client connected; 0: never. The next session starts it again.",
    )

    def catalog_config(self) -> CatalogConfig:
        return CatalogConfig(
            name=self.catalog_name,
            type=self.catalog_type,
            warehouse=self.warehouse,
            uri=self.catalog_uri,
            properties=dict(self.catalog_properties),
            secret_properties=dict(self.catalog_secret_properties),
        )

    def engine(self) -> EngineSettings:
        return EngineSettings(remote=self.remote, master=self.master, state_dir=self.state_dir,
                              catalog=self.catalog_config(), conf=dict(self.spark_conf),
                              idle_timeout_minutes=self.idle_timeout_minutes)

    def remote_url(self) -> str | None:
        """The configured remote engine (`remote`, else $SPARK_REMOTE, read now), or None for
        the embedded server."""
        return self.engine().remote_url()

    def local_server(self) -> LocalSparkServer:
        """The embedded server of this deployment (whether running or not)."""
        return self.engine().local_server()

    def get_session(self) -> SparkSession:
        """A Spark Connect session (the server started first when it is the embedded one and
        not running; a session of a server that has since restarted is replaced)."""
        try:
            return self.engine().session()
        except DeltaportError as exc:
            raise dg.Failure(
                description=f"could not reach the Spark engine: {exc}",
                metadata={"error": type(exc).__name__, "remote": self.remote_url() or "embedded",
                          "catalog": self.catalog_name},
            ) from exc

    @property
    def spark_session(self) -> SparkSession:
        """Same as `get_session()` (the name dagster-pyspark's resources use)."""
        return self.get_session()

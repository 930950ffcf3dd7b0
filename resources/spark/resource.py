"""`SparkResource`: the Dagster face of `build_spark_session` (Spark + one Iceberg catalog).

A thin `dg.ConfigurableResource` with typed, described fields; the session itself is built by
`resources.spark.session`, which knows nothing of Dagster. The session is created lazily, on
the first `get_session()`, so a step that never touches Spark never starts a JVM, and it is
cached for the life of the resource (one SparkContext per process anyway).

Why not dagster-pyspark's `PySparkResource` / `LazyPySparkResource`: both take one flat
``spark_config`` dict and call ``SparkSession.builder.getOrCreate()``. Our session needs work
before the JVM starts (resolving the Iceberg jars with Maven into a machine-local cache, whose
path must not be baked into the run config) and a catalog described by typed fields, mapped to
``spark.sql.catalog.<name>.*``. Extending them would mean overriding their private
``_init_session``; so this resource keeps their public surface instead (`spark_session`,
`spark_context`) and a plain `session_conf()` dict is available for anyone who wants to feed
a `PySparkResource` directly.

Errors from building the session (Maven, pyspark version, catalog config) are translated at
this boundary into `dg.Failure` with the cause in the metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import dagster as dg
from pydantic import Field, PrivateAttr

from resources.errors import DeltaportError
from resources.spark.session import CatalogConfig, build_spark_session

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["SparkResource"]


class SparkResource(dg.ConfigurableResource):
    """A Spark session with Apache Iceberg and one Iceberg catalog, built on first use."""

    master: str = Field(default="local[2]", description="Spark master URL, e.g. local[2] or spark://host:7077.")
    app_name: str = Field(default="deltaport", description="Spark application name.")
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
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark settings; they win over deltaport's small-machine defaults. "
        "spark.jars and spark.sql.extensions given here are added to Iceberg's.",
    )

    _session: SparkSession | None = PrivateAttr(default=None)

    def catalog_config(self) -> CatalogConfig:
        return CatalogConfig(
            name=self.catalog_name,
            type=self.catalog_type,
            warehouse=self.warehouse,
            uri=self.catalog_uri,
            properties=dict(self.catalog_properties),
        )

    def get_session(self) -> SparkSession:
        """The Spark session (built on the first call, then cached)."""
        if self._session is None:
            try:
                self._session = build_spark_session(
                    master=self.master,
                    app_name=self.app_name,
                    catalog=self.catalog_config(),
                    conf=self.spark_conf,
                )
            except DeltaportError as exc:
                raise dg.Failure(
                    description=f"could not build the Spark session: {exc}",
                    metadata={"error": type(exc).__name__, "master": self.master, "catalog": self.catalog_name},
                ) from exc
        return self._session

    @property
    def spark_session(self) -> SparkSession:
        """Same as `get_session()` (the name dagster-pyspark's resources use)."""
        return self.get_session()

    @property
    def spark_context(self) -> SparkContext:
        return self.get_session().sparkContext

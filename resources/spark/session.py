"""A Spark session that reads and writes Apache Iceberg tables, sized for a small machine.

Data flow: `ensure_iceberg_jars()` (Maven, cached) → `session_conf()` (a plain dict, no JVM) →
`build_spark_session()` (starts or reuses the process's one SparkContext).

What this module guarantees:

* Iceberg's Spark runtime comes from our Maven cache and is passed with ``spark.jars``; Ivy
  (``spark.jars.packages``) is never used. The runtime is built for one Spark minor, so a pyspark
  of another minor is refused up front with a clear `SparkSessionError`.
* One Iceberg catalog is registered under `CatalogConfig.name` (default ``lake``, a Hadoop
  catalog whose warehouse ``./lake`` is made absolute when the session is built, so a later
  ``chdir`` cannot move the lake). REST, JDBC and Hive catalogs are the same mapping onto
  ``spark.sql.catalog.<name>.*``; their drivers and credentials are the deployment's business.
* Small-machine defaults (4 shuffle partitions, no UI, 2 GiB driver, UTC session time zone,
  Arrow on, WARN logs, local masters bound to loopback); anything in `conf` wins over them.
* A process has one SparkContext. If one is already running, `build_spark_session` reuses it:
  runtime settings (including a new catalog) are applied to it; if it was started without the
  Iceberg SQL extensions, which cannot be added afterwards, `SparkSessionError` says so.

Nothing here imports Dagster; pyspark is imported only when a session is built.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from resources.errors import DeltaportError
from resources.spark.jars import ICEBERG_RUNTIME_ARTIFACT, ICEBERG_VERSION, ensure_iceberg_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ICEBERG_EXTENSIONS",
    "SPARK_DEFAULTS",
    "CatalogConfig",
    "CatalogType",
    "SparkSessionError",
    "build_spark_session",
    "catalog_conf",
    "session_conf",
]

CatalogType = Literal["hadoop", "rest", "jdbc", "hive"]
CATALOG_TYPES: tuple[str, ...] = ("hadoop", "rest", "jdbc", "hive")
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
SUPPORTED_SPARK_MINOR = "4.1"  # the "4.1" in iceberg-spark-runtime-4.1_2.13

# Defaults for 2 cores and a few GiB; every one can be overridden through `conf`.
SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # progress bars would garble Dagster's captured logs
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",  # Prostore timestamps carry no zone and mean UTC
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.log.level": "WARN",
}


class SparkSessionError(DeltaportError):
    """The Spark session could not be built as asked (bad catalog config, wrong pyspark, a
    running session without the Iceberg extensions)."""


@dataclass(frozen=True)
class CatalogConfig:
    """An Iceberg catalog as Spark sees it: ``spark.sql.catalog.<name>.*``.

    `warehouse`: a folder or URI for tables' data and metadata. A path without a scheme is
    made absolute (relative to the working directory) when the session is built, for every type
    but ``rest``, whose warehouse is often a name the server resolves. `uri`: the REST endpoint,
    JDBC URL or Hive metastore thrift URI. `properties`: any other catalog property
    (``io-impl``, ``s3.endpoint``, ``jdbc.user``, ``cache-enabled``...), passed as they are.
    """

    name: str = "lake"
    type: CatalogType = "hadoop"
    warehouse: str | None = "./lake"
    uri: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise SparkSessionError(f"catalog name must be letters, digits and '_', got {self.name!r}")
        if self.type not in CATALOG_TYPES:
            raise SparkSessionError(f"catalog type must be one of {CATALOG_TYPES}, got {self.type!r}")
        if self.type == "hadoop" and not self.warehouse:
            raise SparkSessionError("a hadoop catalog needs a warehouse folder")
        if self.type in ("rest", "jdbc") and not self.uri:
            raise SparkSessionError(f"a {self.type} catalog needs a uri")


def _absolute_warehouse(catalog: CatalogConfig) -> str | None:
    wh = catalog.warehouse
    if not wh or catalog.type == "rest" or "://" in wh or wh.startswith("file:"):
        return wh
    return str(Path(wh).expanduser().absolute())


def catalog_conf(catalog: CatalogConfig) -> dict[str, str]:
    """The ``spark.sql.catalog.<name>*`` settings registering `catalog` (no JVM needed)."""
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {prefix: ICEBERG_SPARK_CATALOG, f"{prefix}.type": catalog.type}
    warehouse = _absolute_warehouse(catalog)
    if warehouse:
        conf[f"{prefix}.warehouse"] = warehouse
    if catalog.uri:
        conf[f"{prefix}.uri"] = catalog.uri
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = str(value)
    return conf


def session_conf(
    *,
    master: str,
    app_name: str,
    catalog: CatalogConfig,
    jars: list[Path],
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every Spark setting `build_spark_session` applies, as a plain dict (pure: no JVM, no
    environment). Precedence: `SPARK_DEFAULTS` < Iceberg and catalog settings < `conf`; jars
    and SQL extensions given in `conf` are added to ours, not put in their place."""
    merged: dict[str, str] = {"spark.master": master, "spark.app.name": app_name, **SPARK_DEFAULTS}
    if master.startswith("local"):
        # Keep the driver (and its block manager) on loopback: nothing outside needs to reach it.
        merged["spark.driver.host"] = "127.0.0.1"
        merged["spark.driver.bindAddress"] = "127.0.0.1"
    merged["spark.sql.extensions"] = ICEBERG_EXTENSIONS
    merged.update(catalog_conf(catalog))
    extra = {str(k): str(v) for k, v in (conf or {}).items()}
    our_jars = [str(p) for p in jars]
    their_jars = [j for j in extra.pop("spark.jars", "").split(",") if j.strip()]
    merged["spark.jars"] = ",".join(dict.fromkeys(our_jars + their_jars))
    their_ext = [e for e in extra.pop("spark.sql.extensions", "").split(",") if e.strip()]
    merged["spark.sql.extensions"] = ",".join(dict.fromkeys([ICEBERG_EXTENSIONS, *their_ext]))
    merged.update(extra)
    return merged


def _check_pyspark_version() -> None:
    import pyspark

    minor = ".".join(pyspark.__version__.split(".")[:2])
    if minor != SUPPORTED_SPARK_MINOR:
        raise SparkSessionError(
            f"{ICEBERG_RUNTIME_ARTIFACT} {ICEBERG_VERSION} is built for Spark {SUPPORTED_SPARK_MINOR}, "
            f"but pyspark is {pyspark.__version__}; change the artifact in resources/spark/pom.xml "
            "and jars.py, or install pyspark 4.1.x"
        )


def build_spark_session(
    *,
    master: str = "local[2]",
    app_name: str = "deltaport",
    catalog: CatalogConfig | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) the process's Spark session with Iceberg and `catalog` registered.

    Resolves the Iceberg jars first (Maven, cached; `IcebergJarsError` if that fails). Raises
    `SparkSessionError` for a pyspark of another minor than the runtime's, or when a session
    without the Iceberg SQL extensions is already running in this process.
    """
    from pyspark.sql import SparkSession

    _check_pyspark_version()
    catalog = catalog or CatalogConfig()
    settings = session_conf(master=master, app_name=app_name, catalog=catalog,
                            jars=ensure_iceberg_jars(), conf=conf)
    if master.startswith("local"):
        # Read by Spark's launcher before any conf: without it Spark resolves the host name
        # and may warn about (and advertise) a non-loopback address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers must run this interpreter (the venv's, with pyarrow and our codecs),
        # not whatever python3 is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    wanted = catalog_conf(catalog)
    running = SparkSession.getActiveSession()
    if running is not None:
        # getOrCreate() would overwrite the running session's catalog settings with ours; but
        # Spark keeps a catalog it has loaded for the session's life, so the same name with
        # other settings would silently keep pointing at the old one: refuse that first.
        conflicts = {k: (running.conf.get(k, None), v) for k, v in wanted.items()
                     if running.conf.get(k, None) not in (None, v)}
        if conflicts:
            detail = "; ".join(f"{k}: running {old!r}, asked {new!r}" for k, (old, new) in conflicts.items())
            raise SparkSessionError(
                f"catalog {catalog.name!r} is already registered in the running Spark session "
                f"with other settings ({detail}); give this catalog another name, or stop the session"
            )

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()

    extensions = spark.sparkContext.getConf().get("spark.sql.extensions", "") or ""
    if ICEBERG_EXTENSIONS not in extensions.split(","):
        raise SparkSessionError(
            "a Spark session without the Iceberg SQL extensions is already running in this "
            "process; static settings (spark.jars, spark.sql.extensions) cannot change until it "
            "is stopped: stop it, or build the first session with build_spark_session()"
        )
    for key, value in wanted.items():  # a reused session: make sure a new catalog is registered
        spark.conf.set(key, value)
    return spark

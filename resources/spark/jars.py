"""The Apache Iceberg jars for Spark, resolved from Maven Central into a cache outside git.

What this module guarantees:

* The jar is Iceberg's own Spark runtime (``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13``,
  version `ICEBERG_VERSION`), as Maven resolves it for ``resources/spark/pom.xml``. It is one
  shaded jar built for Spark 4.1 and Scala 2.13, i.e. for pyspark 4.1.x. Beside it, the AWS SDK
  its S3FileIO needs (``iceberg-aws-bundle``, ``aws-pom.xml``), in a folder of its own
  (``iceberg-aws-<version>/``): a lake on S3 or an S3-compatible store works with any embedded
  server, and the runtime's folder (shared by every checkout on a machine) is left as it was.
* Jars are cached in ``$DELTAPORT_CACHE_DIR/iceberg-<version>/`` (default
  ``~/.cache/deltaport/iceberg-<version>/``); the environment is read at call time, never at
  import time. Resolution is `resources.maven.resolve_pom`: a marker file holding the POM's
  digest, written only after Maven succeeded, makes later calls instant (a changed POM resolves
  again); concurrent first calls are serialised by a file lock, so two processes never
  half-write the same folder.
* The session builder passes these files with ``spark.jars``. Ivy (``spark.jars.packages``) is
  never used: it would resolve again at every session start, into a cache of its own.

Nothing here imports Dagster or Spark. Every failure raised on purpose is an `IcebergJarsError`
carrying the tail of Maven's output.
"""

from __future__ import annotations

from pathlib import Path

from resources.errors import DeltaportError
from resources.maven import MARKER_NAME as MARKER_NAME  # re-exported: the jars folder's marker
from resources.maven import cache_root, resolve_pom

__all__ = [
    "ICEBERG_RUNTIME_ARTIFACT",
    "ICEBERG_VERSION",
    "IcebergJarsError",
    "ensure_iceberg_jars",
    "iceberg_cache_dir",
]

ICEBERG_VERSION = "1.11.0"  # keep in step with <iceberg.version> in pom.xml
ICEBERG_RUNTIME_ARTIFACT = "iceberg-spark-runtime-4.1_2.13"  # Spark minor _ Scala binary version
POM_PATH = Path(__file__).with_name("pom.xml")
AWS_POM_PATH = Path(__file__).with_name("aws-pom.xml")
AWS_BUNDLE_ARTIFACT = "iceberg-aws-bundle"


class IcebergJarsError(DeltaportError):
    """The Iceberg jars could not be resolved (no Maven, Maven failed or timed out)."""


def iceberg_cache_dir() -> Path:
    """Where the Iceberg jars are cached: ``$DELTAPORT_CACHE_DIR/iceberg-<version>`` or
    ``~/.cache/deltaport/iceberg-<version>`` (the environment is read now, at call time)."""
    return cache_root() / f"iceberg-{ICEBERG_VERSION}"


def ensure_iceberg_jars(cache_dir: Path | None = None, *, timeout: float = 900.0) -> list[Path]:
    """Make sure the Iceberg Spark runtime is in `cache_dir` (default `iceberg_cache_dir()`) and
    the AWS bundle in its sibling ``iceberg-aws-<version>``, and return the absolute paths of
    every jar of both (what ``spark.jars`` needs), sorted.

    Quick when already present. Otherwise runs ``mvn dependency:copy-dependencies`` on
    ``pom.xml`` (see `resources.maven.resolve_pom`); raises `IcebergJarsError` with the tail of
    Maven's output if Maven is missing, fails, or takes longer than `timeout` seconds.
    """
    directory = (Path(cache_dir).expanduser() if cache_dir is not None else iceberg_cache_dir()).absolute()
    resolve_pom(
        POM_PATH,
        directory,
        timeout=timeout,
        error_cls=IcebergJarsError,
        what=f"Iceberg {ICEBERG_VERSION} jars",
        expect=f"{ICEBERG_RUNTIME_ARTIFACT}-*.jar",
        no_maven=f"cannot resolve the Iceberg {ICEBERG_VERSION} Spark runtime "
        f"({ICEBERG_RUNTIME_ARTIFACT}): Maven ('mvn') is not on PATH; install Maven "
        "(it downloads from Maven Central into ~/.m2 and copies into the cache)",
    )
    aws = directory.with_name(f"iceberg-aws-{ICEBERG_VERSION}")
    resolve_pom(
        AWS_POM_PATH,
        aws,
        timeout=timeout,
        error_cls=IcebergJarsError,
        what=f"Iceberg {ICEBERG_VERSION} AWS bundle (S3FileIO)",
        expect=f"{AWS_BUNDLE_ARTIFACT}-*.jar",
    )
    return sorted([*directory.glob("*.jar"), *aws.glob("*.jar")])

"""The classpath of Apache Iceberg's REST catalog server: jars from Maven Central, plus deltaport's
one-class launcher compiled once, both cached outside git.

What flows through: ``resources/demo_objstore/pom.xml`` and ``RestCatalogLoopback.java`` go in; a
classpath (a folder of classes and every jar) comes out.

What this module guarantees:

* The jars are Iceberg's own (version `ICEBERG_VERSION`, the Spark runtime's), resolved by
  `resources.maven.resolve_pom` into ``$DELTAPORT_CACHE_DIR/iceberg-rest-<version>/`` (default
  ``~/.cache/deltaport/``): instant once there, serialised by a file lock, resolved again when
  the POM changes. The environment is read at call time, never at import time.
* The launcher is compiled once (`resources.javac.compiled_classes`: the ``javac`` beside the
  ``java`` that runs it, into a folder named by the source's digest, under a lock, renamed when
  complete): a changed source compiles again, a half-compiled one is never used.

Every failure raised on purpose is a `RestCatalogJarsError` (no Maven, no javac, a failed build).
"""

from __future__ import annotations

from pathlib import Path

from resources.errors import DeltaportError
from resources.javac import compiled_classes
from resources.maven import cache_root, resolve_pom
from resources.spark.jars import ICEBERG_VERSION

__all__ = ["LAUNCHER_CLASS", "RestCatalogJarsError", "rest_catalog_classpath"]

POM_PATH = Path(__file__).with_name("pom.xml")
LAUNCHER_SOURCE = Path(__file__).with_name("RestCatalogLoopback.java")
LAUNCHER_CLASS = "org.apache.iceberg.rest.RestCatalogLoopback"
FIXTURES_ARTIFACT = "iceberg-open-api"


class RestCatalogJarsError(DeltaportError):
    """The REST catalog server's jars or launcher could not be made ready."""


def rest_catalog_classpath(*, timeout: float = 900.0) -> list[Path]:
    """The REST catalog server's classpath: the launcher's classes folder, then every jar."""
    jars = cache_root() / f"iceberg-rest-{ICEBERG_VERSION}"
    resolve_pom(POM_PATH, jars, timeout=timeout, error_cls=RestCatalogJarsError,
                what=f"Iceberg {ICEBERG_VERSION} REST catalog server jars",
                expect=f"{FIXTURES_ARTIFACT}-*-test-fixtures.jar")
    classes = compiled_classes([LAUNCHER_SOURCE], [str(jars / "*")], jars.parent, jars.name,
                               error_cls=RestCatalogJarsError, what="the REST catalog server's launcher",
                               timeout=min(timeout, 300.0))
    return [classes, *sorted(jars.glob("*.jar"))]

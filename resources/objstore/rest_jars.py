"""The classpath of Apache Iceberg's REST catalog server: jars from Maven Central, plus deltaport's
one-class launcher compiled once, both cached outside git.

What flows through: ``resources/objstore/pom.xml`` and ``RestCatalogLoopback.java`` go in; a
classpath (a folder of classes and every jar) comes out.

What this module guarantees:

* The jars are Iceberg's own (version `ICEBERG_VERSION`, the Spark runtime's), resolved by
  `resources.maven.resolve_pom` into ``$DELTAPORT_CACHE_DIR/iceberg-rest-<version>/`` (default
  ``~/.cache/deltaport/``): instant once there, serialised by a file lock, resolved again when
  the POM changes. The environment is read at call time, never at import time.
* The launcher is compiled by the ``javac`` beside the ``java`` that runs it (``$JAVA_HOME/bin``, else PATH) into a folder
  named by the source's digest, under the same lock, written to a temporary folder and renamed
  when complete: a changed source compiles again, a half-compiled one is never used.

Every failure raised on purpose is a `RestCatalogJarsError` (no Maven, no javac, a failed build).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from resources.errors import DeltaportError
from resources.kafka.broker import _java
from resources.maven import cache_root, resolve_pom
from resources.spark.jars import ICEBERG_VERSION

__all__ = ["LAUNCHER_CLASS", "RestCatalogJarsError", "rest_catalog_classpath"]

POM_PATH = Path(__file__).with_name("pom.xml")
LAUNCHER_SOURCE = Path(__file__).with_name("RestCatalogLoopback.java")
LAUNCHER_CLASS = "org.apache.iceberg.rest.RestCatalogLoopback"
FIXTURES_ARTIFACT = "iceberg-open-api"


class RestCatalogJarsError(DeltaportError):
    """The REST catalog server's jars or launcher could not be made ready."""


def _javac() -> str:
    """The javac of the JDK whose java runs the server (symlinks resolved: /usr/bin/java is one)."""
    javac = Path(_java()).resolve().with_name("javac")
    if not javac.is_file():
        raise RestCatalogJarsError(f"cannot build the REST catalog server's launcher: no javac beside {javac.parent}"
                                   "/java; install a JDK 17, not only a JRE (Debian: openjdk-17-jdk-headless)")
    return str(javac)


def _compile(jars: Path, timeout: float) -> Path:
    digest = hashlib.sha256(LAUNCHER_SOURCE.read_bytes()).hexdigest()[:16]
    classes = jars.parent / f"{jars.name}-classes-{digest}"
    if classes.is_dir():
        return classes
    with open(jars.parent / f".{jars.name}-classes.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling the same source
        if classes.is_dir():
            return classes
        scratch = Path(tempfile.mkdtemp(prefix=".classes-", dir=jars.parent))
        try:
            proc = subprocess.run([_javac(), "-nowarn", "-d", str(scratch), "-cp", str(jars / "*"),
                                   str(LAUNCHER_SOURCE)], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, errors="replace", timeout=timeout)
            if proc.returncode != 0:
                raise RestCatalogJarsError(f"javac failed (exit {proc.returncode}) on {LAUNCHER_SOURCE}:\n"
                                           f"{(proc.stdout + proc.stderr)[-3000:]}")
            scratch.rename(classes)
        except subprocess.TimeoutExpired:
            raise RestCatalogJarsError(f"javac did not compile {LAUNCHER_SOURCE} within {timeout:.0f} s") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return classes


def rest_catalog_classpath(*, timeout: float = 900.0) -> list[Path]:
    """The REST catalog server's classpath: the launcher's classes folder, then every jar."""
    jars = cache_root() / f"iceberg-rest-{ICEBERG_VERSION}"
    resolve_pom(POM_PATH, jars, timeout=timeout, error_cls=RestCatalogJarsError,
                what=f"Iceberg {ICEBERG_VERSION} REST catalog server jars",
                expect=f"{FIXTURES_ARTIFACT}-*-test-fixtures.jar")
    return [_compile(jars, min(timeout, 300.0)), *sorted(jars.glob("*.jar"))]

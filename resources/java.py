"""Which ``java`` deltaport's JVMs (the Kafka broker, the Spark Connect server, the REST catalog,
javac's compiles) run with, found once here so that each of them agrees on it.

What flows through: the environment (``JAVA_HOME``, read at call time, never at import) and PATH
go in; the path of a ``java`` executable comes out, or a typed error naming what needed it.
Nothing here imports Dagster, Spark or Kafka.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from resources.errors import DeltaportError

__all__ = ["find_java", "require_java"]


def find_java() -> str | None:
    """The ``java`` deltaport's JVMs run with, as spark-submit picks it: ``$JAVA_HOME/bin/java``
    (read now), else the one on PATH; None when there is neither."""
    home = os.environ.get("JAVA_HOME", "").strip()
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def require_java(error_cls: type[DeltaportError], what: str) -> str:
    """`find_java`'s java; `error_cls` saying it cannot `what` (e.g. "start Kafka") when there is none."""
    java = find_java()
    if java is None:
        raise error_cls(f"cannot {what}: no 'java' on PATH (and JAVA_HOME is not set); it needs Java 17+")
    return java

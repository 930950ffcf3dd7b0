"""The Apache Iceberg jars for Spark, resolved from Maven Central into a cache outside git.

What this module guarantees:

* The jar is Iceberg's own Spark runtime (``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13``,
  version `ICEBERG_VERSION`), as Maven resolves it for ``resources/spark/pom.xml``. It is one
  shaded jar built for Spark 4.1 and Scala 2.13, i.e. for pyspark 4.1.x.
* Jars are cached in ``$DELTAPORT_CACHE_DIR/iceberg-<version>/`` (default
  ``~/.cache/deltaport/iceberg-<version>/``); the environment is read at call time, never at
  import time. A marker file holding the POM's digest, written only after Maven succeeded, makes
  later calls instant (a changed POM resolves again); concurrent first calls are serialised by a
  file lock, so two processes never half-write the same folder.
* The session builder passes these files with ``spark.jars``. Ivy (``spark.jars.packages``) is
  never used: it would resolve again at every session start, into a cache of its own.

Nothing here imports Dagster or Spark. Every failure raised on purpose is an `IcebergJarsError`
carrying the tail of Maven's output.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from resources.errors import DeltaportError

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
MARKER_NAME = ".deltaport-jars-complete"
LOG_TAIL_LINES = 40

_log = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class IcebergJarsError(DeltaportError):
    """The Iceberg jars could not be resolved (no Maven, Maven failed or timed out)."""


def iceberg_cache_dir() -> Path:
    """Where the Iceberg jars are cached: ``$DELTAPORT_CACHE_DIR/iceberg-<version>`` or
    ``~/.cache/deltaport/iceberg-<version>`` (the environment is read now, at call time)."""
    root = os.environ.get("DELTAPORT_CACHE_DIR", "").strip()
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "deltaport"
    return base / f"iceberg-{ICEBERG_VERSION}"


def _pom_digest() -> str:
    return hashlib.sha256(POM_PATH.read_bytes()).hexdigest()


def _runtime_jars(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{ICEBERG_RUNTIME_ARTIFACT}-*.jar"))


def _cached_jars(directory: Path, digest: str) -> list[Path] | None:
    """The cached jars if the marker matches this POM and the runtime jar is there, else None."""
    try:
        if (directory / MARKER_NAME).read_text().strip() != digest:
            return None
    except OSError:
        return None
    if not _runtime_jars(directory):
        return None
    return sorted(directory.glob("*.jar"))


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(_ANSI.sub("", text).splitlines()[-lines:])


def ensure_iceberg_jars(cache_dir: Path | None = None, *, timeout: float = 900.0) -> list[Path]:
    """Make sure the Iceberg Spark runtime is in `cache_dir` (default `iceberg_cache_dir()`) and
    return the absolute paths of every jar there (what ``spark.jars`` needs), sorted.

    Quick when already present. Otherwise runs ``mvn dependency:copy-dependencies`` on
    ``pom.xml``; raises `IcebergJarsError` with the tail of Maven's output if Maven is missing,
    fails, or takes longer than `timeout` seconds.
    """
    directory = (Path(cache_dir).expanduser() if cache_dir is not None else iceberg_cache_dir()).absolute()
    digest = _pom_digest()
    jars = _cached_jars(directory, digest)
    if jars is not None:
        return jars

    directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = directory.parent / f".{directory.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving the same jars
        jars = _cached_jars(directory, digest)
        if jars is not None:
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise IcebergJarsError(
                f"cannot resolve the Iceberg {ICEBERG_VERSION} Spark runtime "
                f"({ICEBERG_RUNTIME_ARTIFACT}): Maven ('mvn') is not on PATH; install Maven "
                "(it downloads from Maven Central into ~/.m2 and copies into the cache)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MARKER_NAME).unlink(missing_ok=True)
        for stale in directory.glob("*.jar"):  # a half-finished attempt, or an older POM's jars
            stale.unlink()
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM_PATH),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={directory}",
        ]  # fmt: skip
        started = time.monotonic()
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode(errors="replace")
            raise IcebergJarsError(
                f"Maven did not resolve the Iceberg {ICEBERG_VERSION} jars within {timeout:.0f} s "
                f"({' '.join(cmd)}); last output:\n{_tail(out)}"
            ) from None
        if proc.returncode != 0 or not _runtime_jars(directory):
            raise IcebergJarsError(
                f"Maven failed (exit {proc.returncode}) to resolve the Iceberg {ICEBERG_VERSION} "
                f"jars into {directory} ({' '.join(cmd)}); last output:\n{_tail(proc.stdout)}"
            )
        (directory / MARKER_NAME).write_text(digest + "\n")
        _log.info("resolved Iceberg %s jars into %s in %.1f s", ICEBERG_VERSION, directory,
                  time.monotonic() - started)
        return sorted(directory.glob("*.jar"))

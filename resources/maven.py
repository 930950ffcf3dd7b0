"""Resolve a POM's runtime jars with Maven into a cache folder outside git.

What this module guarantees:

* `resolve_pom()` copies the runtime-scope dependencies of a POM into a folder by running
  ``mvn -q -B -Dstyle.color=never -f POM dependency:copy-dependencies -DincludeScope=runtime
  -DoutputDirectory=DEST`` (Maven downloads from Maven Central into ``~/.m2``, then copies).
* A marker file holding the POM's sha256, written only after Maven succeeded and the expected
  jar is there, makes later calls instant; a changed POM resolves again, after the folder's old
  jars were removed. Concurrent first calls are serialised by a file lock next to the folder, so
  two processes never half-write the same folder.
* `cache_root()` is where callers keep such folders: ``$DELTAPORT_CACHE_DIR`` or
  ``~/.cache/deltaport``; the environment is read at call time, never at import time.

Nothing here imports Dagster, Spark or Kafka. Every failure raised on purpose is an instance of
the caller's `error_cls` (a `DeltaportError`) carrying the tail of Maven's output.
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

__all__ = ["MARKER_NAME", "cache_root", "resolve_pom"]

MARKER_NAME = ".deltaport-jars-complete"
LOG_TAIL_LINES = 40

_log = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cache_root() -> Path:
    """``$DELTAPORT_CACHE_DIR`` (read now, at call time) or ``~/.cache/deltaport``."""
    root = os.environ.get("DELTAPORT_CACHE_DIR", "").strip()
    return Path(root).expanduser() if root else Path.home() / ".cache" / "deltaport"


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(_ANSI.sub("", text).splitlines()[-lines:])


def _ready(dest: Path, digest: str, expect: str) -> bool:
    try:
        return (dest / MARKER_NAME).read_text().strip() == digest and any(dest.glob(expect))
    except OSError:
        return False


def resolve_pom(
    pom: Path,
    dest: Path,
    *,
    timeout: float,
    error_cls: type[DeltaportError],
    what: str | None = None,
    expect: str = "*.jar",
    no_maven: str | None = None,
) -> Path:
    """Make sure the runtime jars of `pom` are in `dest` and return `dest`.

    Quick when the marker in `dest` holds this POM's sha256 and a jar matching `expect` (a glob
    in `dest`) is there. Otherwise, under a lock, empties `dest` of jars and runs Maven; raises
    `error_cls` if Maven is not on PATH (message `no_maven`), takes longer than `timeout`
    seconds, fails, or leaves no jar matching `expect`. `what` names the jars in messages
    (e.g. ``"Kafka 4.1.2 jars"``).
    """
    pom, dest = Path(pom), Path(dest)
    what = what or f"jars of {pom}"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    if _ready(dest, digest, expect):
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    lock_path = dest.parent / f".{dest.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving the same jars
        if _ready(dest, digest, expect):
            return dest
        mvn = shutil.which("mvn")
        if mvn is None:
            raise error_cls(no_maven or f"cannot resolve the {what}: Maven ('mvn') is not on PATH; install Maven")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / MARKER_NAME).unlink(missing_ok=True)
        for stale in dest.glob("*.jar"):  # a half-finished attempt, or an older POM's jars
            stale.unlink()
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            # absolute: Maven would take a relative folder as relative to the POM's folder
            f"-DoutputDirectory={dest.absolute()}",
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
            raise error_cls(
                f"Maven did not resolve the {what} within {timeout:.0f} s "
                f"({' '.join(cmd)}); last output:\n{_tail(out)}"
            ) from None
        if proc.returncode != 0 or not any(dest.glob(expect)):
            raise error_cls(
                f"Maven failed (exit {proc.returncode}) to resolve the {what} "
                f"into {dest} ({' '.join(cmd)}); last output:\n{_tail(proc.stdout)}"
            )
        (dest / MARKER_NAME).write_text(digest + "\n")
        _log.info("resolved %s into %s in %.1f s", what, dest, time.monotonic() - started)
        return dest

"""deltaport's few Java classes, compiled once per machine into a cache folder outside git.

What flows through: Java source files and the classpath they compile against go in; a folder of
classes comes out, which a JVM takes on its classpath, or a jar of them (`compiled_jar`): a JVM
that maps a class-data-sharing archive takes no non-empty folder on its classpath.

What this module guarantees:

* The classes are compiled by the ``javac`` beside the ``java`` that runs them (``$JAVA_HOME/bin``,
  else PATH; symlinks resolved) into a folder named by the digest of the sources and of the
  classpath's file names: a changed source, or a classpath of another version, compiles again.
* Concurrent first calls are serialised by a file lock next to the folder; the classes are
  written to a temporary folder and renamed when complete, so a half-compiled folder is never used;
  a jar likewise (written under a temporary name, renamed).

Nothing here imports Dagster, Spark or Kafka. Every failure raised on purpose is an instance of
the caller's `error_cls` (no javac, javac failed or timed out).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from resources.errors import DeltaportError
from resources.java import require_java

__all__ = ["compiled_classes", "compiled_jar", "javac"]


def javac(error_cls: type[DeltaportError], what: str) -> str:
    """The javac of the JDK whose java runs the classes; `error_cls` naming `what` if there is none."""
    found = Path(require_java(error_cls, f"build {what}")).resolve().with_name("javac")
    if not found.is_file():
        raise error_cls(f"cannot build {what}: no javac beside {found.parent}/java; install a JDK 17, "
                        "not only a JRE (Debian: openjdk-17-jdk-headless)")
    return str(found)


def compiled_classes(sources: Sequence[Path], classpath: Sequence[str], parent: Path, name: str, *,
                     error_cls: type[DeltaportError], what: str, timeout: float = 300.0) -> Path:
    """The folder ``<parent>/<name>-classes-<digest>`` holding `sources` compiled against
    `classpath` (files, or folders with ``*``), compiled now if it is not there yet."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    digest.update("\0".join(Path(c).name for c in classpath).encode())
    classes = parent / f"{name}-classes-{digest.hexdigest()[:16]}"
    if classes.is_dir():
        return classes
    parent.mkdir(parents=True, exist_ok=True)
    with open(parent / f".{name}-classes.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling the same sources
        if classes.is_dir():
            return classes
        scratch = Path(tempfile.mkdtemp(prefix=".classes-", dir=parent))
        try:
            proc = subprocess.run([javac(error_cls, what), "-nowarn", "-d", str(scratch), "-cp", ":".join(classpath),
                                   *map(str, sources)], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, errors="replace", timeout=timeout)
            if proc.returncode != 0:
                raise error_cls(f"javac failed (exit {proc.returncode}) building {what} from "
                                f"{', '.join(map(str, sources))}:\n{(proc.stdout + proc.stderr)[-3000:]}")
            scratch.rename(classes)
        except subprocess.TimeoutExpired:
            raise error_cls(f"javac did not build {what} within {timeout:.0f} s") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return classes


def compiled_jar(sources: Sequence[Path], classpath: Sequence[str], parent: Path, name: str, *,
                 error_cls: type[DeltaportError], what: str, timeout: float = 300.0) -> Path:
    """`compiled_classes` as the jar ``<folder>.jar`` beside the folder (made now if it is not
    there yet; its entries in name order with fixed times, so the same classes make the same jar)."""
    classes = compiled_classes(sources, classpath, parent, name, error_cls=error_cls, what=what, timeout=timeout)
    jar = classes.with_name(classes.name + ".jar")
    if jar.is_file():
        return jar
    fd, scratch = tempfile.mkstemp(prefix=".jar-", dir=parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(scratch, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)), "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(p for p in classes.rglob("*") if p.is_file()):
                entry = zipfile.ZipInfo(path.relative_to(classes).as_posix(), (1980, 1, 1, 0, 0, 0))
                entry.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(entry, path.read_bytes())
        os.replace(scratch, jar)  # another process may have made the same jar meanwhile: same bytes
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    return jar

"""Class-data sharing for the JVMs deltaport starts: a JVM maps the classes an earlier one loaded
instead of loading, parsing and verifying them again.

What flows through: a JVM's name and what its classes depend on (its classpath, the versions)
go in; the `-XX` option the JVM starts with comes out, and, once a JVM started with
``-XX:ArchiveClassesAtExit`` has ended, its archive is published for the next ones
(`publish`). The archive lives in ``<cache>/class-archives/`` (``$DELTAPORT_CACHE_DIR``, default
``~/.cache/deltaport``; outside git), about 200 MB for the Spark Connect server.

Who uses it: the embedded Spark Connect server (resources/spark/server.py, published by its
keeper) and the embedded Kafka broker's two JVMs (resources/kafka/broker.py).

Why: the embedded Spark server loads some 20,000 classes at start and on its first Iceberg work.
Measured on 2 cores (2026-11-28): up in 4.7-5.1 s instead of 8.5-8.7 s, 6.8-7.2 CPU seconds
instead of 12.6-12.9, its first table written and read 4.25 s later instead of 5.4-5.8 s
(docs/performance.md, "Settings that change the figures"). A cron `sync` whose server stopped
for idleness starts it again at that cost, and so does every test session.

What it guarantees:

* The first JVM of a given identity (the archive's name, the `identity` strings, the ``java``
  binary and its libjvm) runs with ``-XX:ArchiveClassesAtExit`` into a file of its own (``.part``);
  its keeper publishes it (`publish`) only after that JVM ended by itself or on SIGTERM (never
  after a SIGKILL, which can cut the dump short), and only when it is one (its magic) that a JVM
  maps (``java -XX:SharedArchiveFile=<part> -version`` exits 0: a truncated archive makes a JVM
  abort, not fall back); the rename is atomic. JVMs of that identity started after it map it.
* Another identity (a new pyspark, another classpath, jars reinstalled, another JDK:
  `classpath_identity` names each jar's path, size and time, as the JVM checks them) gets an
  archive of its own: never one made for other classes. A JVM that cannot use an archive (its classpath differs) runs
  without one, as the JVM decides (``-Xshare:auto``, the default).
* Stale ``.part`` files (a JVM killed while it dumped) are removed by the next caller, and a
  publish keeps the newest `KEEP` archives of its name.

Nothing here imports Dagster, Spark or Kafka.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClassArchive", "class_archive", "classpath_identity", "mentions_sharing", "publish", "sharing_options"]

FOLDER = "class-archives"
_STALE_PART_SECONDS = 15 * 60  # a dump takes seconds: a .part this old was cut short
KEEP = 3  # archives kept per name: a machine may run a few deployments of other versions


@dataclass(frozen=True)
class ClassArchive:
    final: Path  # the published archive of this identity
    part: Path  # where this launch's JVM dumps one when there is none yet
    java: str

    def java_options(self) -> list[str]:
        """The option of the JVM about to start: map the archive, or make it at exit."""
        if self.final.is_file():
            return [f"-XX:SharedArchiveFile={self.final}"]
        return [f"-XX:ArchiveClassesAtExit={self.part}"]

    def to_json(self) -> dict[str, str]:
        return {"final": str(self.final), "part": str(self.part), "java": self.java}


def classpath_identity(entries: Iterable[str | Path]) -> list[str]:
    """What a JVM checks of its classpath before it maps an archive: each entry's absolute path,
    size and time (a reinstalled venv's jars are new files: a new archive, not one the JVM refuses)."""
    out = []
    for entry in entries:
        path = Path(entry).absolute()
        try:
            stat = path.stat()
            out.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            out.append(f"{path}:missing")
    return out


# Java options by which a user takes class-data sharing into their own hands.
_SHARING_OPTIONS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")


def mentions_sharing(options: str) -> bool:
    """Whether JVM `options` speak of class-data sharing themselves (then deltaport adds no archive)."""
    return any(o in options for o in _SHARING_OPTIONS)


def sharing_options(archive: ClassArchive | None) -> list[str]:
    """`archive`'s Java options, or none (no archive: the JVM starts without sharing)."""
    return archive.java_options() if archive is not None else []


def class_archive(name: str, identity: Sequence[str], *, java: str, cache: Path) -> ClassArchive:
    """The archive of JVMs called `name` whose classes `identity` names (classpath entries,
    versions), run by `java`; stale parts in `cache`'s folder removed."""
    resolved = Path(java).resolve()
    digest = hashlib.sha256("\0".join([name, str(resolved), *_jvm_identity(resolved), *identity]).encode())
    folder = cache / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for part in folder.glob("*.part"):
        try:
            if now - part.stat().st_mtime > _STALE_PART_SECONDS:
                part.unlink()
        except OSError:
            continue  # another caller removed or published it
    stem = f"{name}-{digest.hexdigest()[:16]}"
    return ClassArchive(folder / f"{stem}.jsa", folder / f"{stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part",
                        str(resolved))


def publish(archive: ClassArchive, *, killed: bool, timeout: float = 60.0) -> bool:
    """After the JVM that may have dumped `archive.part` ended (`killed`: by SIGKILL): rename it to
    the published archive if it is whole (module docstring); else remove it. Whether it was published."""
    part = archive.part
    if not part.is_file():
        return False
    try:
        if killed or not _maps(archive.java, part, timeout):
            return False
        os.replace(part, archive.final)  # another JVM may have published one meanwhile: as good
        _keep_newest(archive.final)
        return True
    finally:
        part.unlink(missing_ok=True)


# The first bytes of a dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, 0xf00baba8, little-endian).
_DYNAMIC_MAGIC = b"\xa8\xab\x0b\xf0"


def _keep_newest(final: Path) -> None:
    """Remove the archives of the same name but the newest `KEEP` (other pyspark versions,
    classpaths or JDKs: ~200 MB each)."""
    name = final.name.rsplit("-", 1)[0]
    found = []
    for other in final.parent.glob(f"{name}-*.jsa"):
        try:
            found.append((other.stat().st_mtime, other))
        except OSError:
            continue
    for _, other in sorted(found, reverse=True)[KEEP:]:
        if other != final:
            other.unlink(missing_ok=True)


def _maps(java: str, archive: Path, timeout: float) -> bool:
    """Whether `archive` is a dynamic archive a JVM maps without aborting (a JVM that does not
    recognise a file at all starts without it, exit 0: hence the magic first)."""
    with open(archive, "rb") as f:
        if f.read(4) != _DYNAMIC_MAGIC:
            return False
    try:
        done = subprocess.run([java, f"-XX:SharedArchiveFile={archive}", "-XX:-CreateCoredumpOnCrash",
                               "-XX:ErrorFile=/dev/null", "-version"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _jvm_identity(java: Path) -> list[str]:
    """What tells one JDK build from another without starting it: its libjvm's size and time."""
    for lib in (java.parent.parent / "lib" / "server" / "libjvm.so", java.parent.parent / "lib" / "libjvm.so"):
        try:
            stat = lib.stat()
        except OSError:
            continue
        return [str(lib), str(stat.st_size), str(stat.st_mtime_ns)]
    return []

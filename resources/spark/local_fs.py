"""The embedded Spark server's `file:` file system: Hadoop's own, without a process per file.

What flows through: the server's master URL goes in; the Spark settings that put deltaport's
`NoForkLocalFileSystem` (``java/``, compiled once per machine into a jar, `resources.javac`) under `file:`
paths come out, or none.

Why: pip's pyspark ships no Hadoop native library, so Hadoop's local file system sets the
permission of each file and directory it creates by running ``chmod`` in a process of its own
(``RawLocalFileSystem.setPermission``). An Iceberg commit creates four to eight files (data,
manifest, manifest list, metadata, and each one's ``.crc``): a JFR recording of 14 small steady
deltas counted 2,264 processes started by the server, 160 a delta, each a fork of a JVM of
gigabytes. The class sets the same bits through java.nio (docs/performance.md, "Settings that
change the figures").

What it guarantees: the same files, checksums and permission bits as Hadoop's `LocalFileSystem`;
only the server's own JVMs get it (a local master, or a standalone cluster on this machine's
loopback, whose executors read the same folder), never a cluster elsewhere, which could not find
the classes. If they cannot be built (no javac: a JRE only), the server starts with Hadoop's own
file system and a warning says what that costs. A user's ``spark.conf`` may set
``spark.hadoop.fs.file.impl`` back to ``org.apache.hadoop.fs.LocalFileSystem``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from resources.errors import DeltaportError

__all__ = ["LOCAL_FS_CLASS", "local_fs_conf"]

LOCAL_FS_CLASS = "io.deltaport.hadoop.NoForkLocalFileSystem"
SOURCES = (Path(__file__).with_name("java") / "NoForkRawLocalFileSystem.java",
           Path(__file__).with_name("java") / "NoForkLocalFileSystem.java")
_LOOPBACK_MASTERS = ("local", "spark://127.0.0.1:", "spark://localhost:")

_log = logging.getLogger(__name__)


class LocalFsError(DeltaportError):
    """deltaport's local file system classes could not be built."""


def _hadoop_api_jar() -> Path:
    """The Hadoop client API jar of the installed pyspark: what the server runs, so what the
    classes compile against."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise LocalFsError(f"pyspark at {Path(pyspark.__file__).parent} ships no hadoop-client-api jar")
    return found[-1]


def local_fs_classes() -> Path:
    """The jar of the compiled classes (built now if needed); `LocalFsError` if they cannot be.
    A jar, not a folder: the server's class-data-sharing archive (`cds.py`) takes no folder."""
    from resources.javac import compiled_jar
    from resources.maven import cache_root

    return compiled_jar(list(SOURCES), [str(_hadoop_api_jar())], cache_root(), "local-fs",
                            error_cls=LocalFsError, what="deltaport's local file system for Spark")


def local_fs_conf(master: str) -> dict[str, str]:
    """The settings for a server on `master` (module docstring): the file system class and the
    classpath of the JVMs that use it; {} for a cluster elsewhere, or when the classes cannot
    be built."""
    if not master.startswith(_LOOPBACK_MASTERS):
        return {}
    try:
        classes = str(local_fs_classes())
    except DeltaportError as exc:
        _log.warning("the embedded Spark server keeps Hadoop's local file system, which starts a chmod "
                     "process for every file it writes (about 160 a steady delta): %s", exc)
        return {}
    conf = {"spark.hadoop.fs.file.impl": LOCAL_FS_CLASS, "spark.driver.extraClassPath": classes}
    if master.startswith("spark://"):
        conf["spark.executor.extraClassPath"] = classes
    return conf

"""The embedded server writes the lake through deltaport's local file system
(resources/spark/local_fs.py): the same files and permission bits as Hadoop's own, and no
``chmod`` process per file.

How "no process" is seen from outside: Linux adds the CPU time of a process's ended children
to its own `cutime` and `cstime` (/proc/<pid>/stat); a ``chmod`` run per file adds about a
millisecond each. Measured with the same commits on a server of Hadoop's own file system
(``spark.hadoop.fs.file.impl=org.apache.hadoop.fs.LocalFileSystem``): 35 clock ticks, against
1 on deltaport's, the files' bits the same.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from resources.spark.local_fs import LOCAL_FS_CLASS

pytestmark = pytest.mark.integration

COMMITS = 12


def _children_cpu_ticks(pid: int) -> int:
    """cutime + cstime of `pid`: the CPU time, in clock ticks, of its children that have ended."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[13]) + int(fields[14])  # fields 16 and 17 of proc(5), counted from the state (3)


def _commits(spark, table: str) -> None:
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg PARTITIONED BY (id)")
    for i in range(COMMITS):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'n{i}')")


def _modes(folder: Path) -> dict[str, set[int]]:
    """{"dirs"|"files": the permission bits found} under `folder`."""
    out: dict[str, set[int]] = {"dirs": set(), "files": set()}
    for path in folder.rglob("*"):
        out["dirs" if path.is_dir() else "files"].add(stat.S_IMODE(path.stat().st_mode))
    return out


def test_the_lake_is_written_with_hadoops_bits_and_no_process_per_file(spark, spark_remote, lake_ns):
    from tests.integration.conftest import _embedded

    if not _embedded:
        pytest.skip("the tests use $SPARK_REMOTE's server: not deltaport's embedded one")
    pid = _embedded[0].status().pid
    assert spark.conf.get("spark.hadoop.fs.file.impl") == LOCAL_FS_CLASS

    before = _children_cpu_ticks(pid)
    _commits(spark, f"{lake_ns}.t")
    grew = _children_cpu_ticks(pid) - before
    assert spark.table(f"{lake_ns}.t").count() == COMMITS

    warehouse = Path(spark.conf.get("spark.sql.catalog.lake.warehouse").removeprefix("file:"))
    folder = warehouse / lake_ns.split(".", 1)[1] / "t"
    written = _modes(folder)
    assert len(list(folder.rglob("*.crc"))) >= 4 * COMMITS  # checksums kept, as Hadoop's LocalFileSystem does
    # Hadoop's default umask (fs.permissions.umask-mode) is 022: files 0644, folders 0755
    assert written == {"dirs": {0o755}, "files": {0o644}}, written
    # 4+ files a commit, each with its .crc: Hadoop's own file system starts ~100 chmod processes here
    assert grew <= 5, f"the server's ended children used {grew} clock ticks of CPU during {COMMITS} commits"

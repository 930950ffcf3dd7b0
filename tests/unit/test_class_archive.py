"""resources/class_archive.py: which archive a JVM gets, and what is published (the JVM side, a
server dumping one and the next mapping it, is in tests/integration/test_spark_server.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from resources.class_archive import class_archive, classpath_identity, publish

JAVA = shutil.which("java")


@pytest.fixture
def java():
    if JAVA is None:
        pytest.skip("no java on PATH")
    return JAVA


def test_one_archive_per_identity_and_a_part_per_launch(tmp_path, java):
    a = class_archive("srv", ["pyspark 4.1", "x.jar"], java=java, cache=tmp_path)
    again = class_archive("srv", ["pyspark 4.1", "x.jar"], java=java, cache=tmp_path)
    assert a.final == again.final and a.part != again.part and a.part.parent == a.final.parent
    assert class_archive("srv", ["pyspark 4.2", "x.jar"], java=java, cache=tmp_path).final != a.final
    assert class_archive("other", ["pyspark 4.1", "x.jar"], java=java, cache=tmp_path).final != a.final
    assert a.java_options() == [f"-XX:ArchiveClassesAtExit={a.part}"]  # none yet: this JVM makes it
    a.final.write_bytes(b"published")
    assert a.java_options() == [f"-XX:SharedArchiveFile={a.final}"]


def test_only_a_whole_archive_of_a_jvm_not_killed_is_published(tmp_path, java):
    a = class_archive("srv", ["v1"], java=java, cache=tmp_path)
    assert not publish(a, killed=False)  # the JVM dumped nothing: nothing to do

    a.part.write_bytes(b"\0" * 4096)  # cut short: a JVM mapping it would abort, not fall back
    assert not publish(a, killed=False) and not a.part.exists() and not a.final.exists()

    a.part.write_bytes(b"anything")
    assert not publish(a, killed=True) and not a.part.exists() and not a.final.exists()


def test_a_dumped_archive_is_published_and_one_cut_short_is_not(tmp_path, java):
    """A real dynamic archive (a JVM's `-version` dumps a small one) is published; the same
    bytes cut short are not (a JVM mapping them aborts)."""
    a = class_archive("srv", ["v1"], java=java, cache=tmp_path)
    subprocess.run([java, *a.java_options(), "-version"], check=True, capture_output=True, timeout=120)
    whole = a.part.read_bytes()
    a.part.write_bytes(whole[: len(whole) // 2])
    assert not publish(a, killed=False) and not a.final.exists()
    a.part.write_bytes(whole)
    assert publish(a, killed=False) and a.final.read_bytes() == whole and not a.part.exists()
    again = class_archive("srv", ["v1"], java=java, cache=tmp_path)
    assert again.java_options() == [f"-XX:SharedArchiveFile={a.final}"]
    for n, stale in enumerate(("srv-0000000000000001.jsa", "srv-0000000000000002.jsa", "srv-0000000000000003.jsa")):
        (tmp_path / "class-archives" / stale).write_bytes(b"older")
        os.utime(tmp_path / "class-archives" / stale, (1_000_000 + n, 1_000_000 + n))
    a = class_archive("srv", ["v1"], java=java, cache=tmp_path)
    a.final.unlink()
    subprocess.run([java, *a.java_options(), "-version"], check=True, capture_output=True, timeout=120)
    assert publish(a, killed=False)  # the newest 3 of the name kept: the oldest other one goes
    assert sorted(p.name for p in a.final.parent.glob("srv-*.jsa")) == sorted(
        [a.final.name, "srv-0000000000000002.jsa", "srv-0000000000000003.jsa"])
    shared = subprocess.run([java, *again.java_options(), "-Xshare:on", "-version"], capture_output=True, text=True,
                            timeout=120)
    assert shared.returncode == 0 and "sharing" in shared.stderr


def test_stale_parts_are_removed_by_the_next_caller(tmp_path, java):
    a = class_archive("srv", ["v1"], java=java, cache=tmp_path)
    stale, fresh = a.part.with_name("srv-x.1-old.part"), a.part.with_name("srv-x.2-new.part")
    for part in (stale, fresh):
        part.write_bytes(b"dumping")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    class_archive("srv", ["v1"], java=java, cache=tmp_path)
    assert not stale.exists() and fresh.exists()  # a JVM may still be writing the fresh one


def test_jars_reinstalled_or_moved_make_another_identity(tmp_path, java):
    """A JVM maps an archive only for the classpath it was made with (paths, sizes, times): a
    venv installed again, or elsewhere, gets an archive of its own instead of one it refuses."""
    jar = tmp_path / "a" / "x.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"jar")

    def final():
        return class_archive("srv", classpath_identity([jar]), java=java, cache=tmp_path).final

    first = final()
    assert final() == first
    os.utime(jar, (1_000_000, 1_000_000))  # reinstalled: a new file of the same name and size
    assert final() != first
    moved = tmp_path / "b" / "x.jar"
    moved.parent.mkdir()
    shutil.copy2(jar, moved)
    assert class_archive("srv", classpath_identity([moved]), java=java, cache=tmp_path).final != final()

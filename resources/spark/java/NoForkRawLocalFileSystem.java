package io.deltaport.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, setting a file's permission bits through java.nio instead of a
 * `chmod` process. Without Hadoop's native library (pip's pyspark ships none), every file and
 * directory Hadoop creates gets `chmod` run in a process of its own: four to eight per Iceberg
 * commit (data, manifest, manifest list, metadata, and each one's .crc), 160 per steady delta.
 * The bits set are the same; a permission with bits java.nio cannot set (sticky, setuid) and
 * a file system without POSIX permissions go the way Hadoop goes.
 */
public class NoForkRawLocalFileSystem extends RawLocalFileSystem {
  // Bit i of a permission (0777 = rwxrwxrwx), from the others' execute bit up.
  private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ};

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    int mode = permission.toShort();
    if ((mode & ~0777) != 0) {
      super.setPermission(p, permission);
      return;
    }
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        set.add(BITS[i]);
      }
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission);
    }
  }
}

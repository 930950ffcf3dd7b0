package io.deltaport.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/** Hadoop's `file:` file system (checksums kept) over {@link NoForkRawLocalFileSystem}. */
public class NoForkLocalFileSystem extends LocalFileSystem {
  public NoForkLocalFileSystem() {
    super(new NoForkRawLocalFileSystem());
  }
}

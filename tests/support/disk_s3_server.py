"""An S3-compatible store that keeps its objects on disk through a crash: gofakes3 (the Go module
``github.com/johannesboyne/gofakes3``, version `GOFAKES3_VERSION`) with its bolt backend, for the
fault case of a store killed (SIGKILL) and restarted in the middle of a run. moto's server keeps
objects in its memory, so a restart of it is a new, empty store: no test of recovery.

What flows through: a folder goes in (the store's one bbolt file, ``objects.bolt``, and its log);
an endpoint ``http://127.0.0.1:<port>`` comes out, path-style, as `S3Server`'s.

What this module guarantees (besides `resources.demo_objstore.process`'s and `S3Server`'s):

* Every PUT the store answered is in its bbolt file, one committed transaction each (bbolt
  syncs its file on commit), so a SIGKILL loses no object it acknowledged; `restart(crash=True)`
  comes back on the same port with the same buckets and objects.
* The binary is built from the Go module proxy by ``go install`` (the machine's Go toolchain)
  into ``$DELTAPORT_CACHE_DIR/gofakes3-<version>/`` on first use (``make jars`` does it first),
  under a lock; no Go toolchain: a clear `ObjectStoreError`.
* It checks no signature (as moto): the secret key never reaches it.
* It stores a body sent in aws-chunked encoding as it came, chunk headers and all (gofakes3
  v1.2.0 does not decode it; measured: the REST server then failed to parse its own
  ``*.metadata.json``), so S3FileIO's clients of it need its `client_properties` (plain bodies).
* With `clock` (an RFC 3339 time), the store's clock stands still at that time: every object it
  stores is stamped with it. A clock days in the past makes every object older than the orphan
  pass's margin (Iceberg refuses a margin under 24 hours outside its own tests), so a test can
  see maintenance remove the orphans a failed run left, with the platform's own settings.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from resources.maven import cache_root
from resources.demo_objstore.process import ObjectStoreError
from resources.demo_objstore.s3_server import S3Server

__all__ = ["GOFAKES3_VERSION", "DiskS3Server", "gofakes3_binary"]

GOFAKES3_MODULE = "github.com/johannesboyne/gofakes3/cmd/gofakes3"
GOFAKES3_VERSION = "v1.2.0"


def gofakes3_binary(*, timeout: float = 600.0) -> Path:
    """The gofakes3 binary, built with ``go install`` into the cache the first time."""
    folder = cache_root() / f"gofakes3-{GOFAKES3_VERSION}"
    binary = folder / "gofakes3"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ObjectStoreError("the on-disk S3 test server (gofakes3) is built with Go: install a Go toolchain "
                               "(Debian: golang) or skip the store-restart tests")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it
        if binary.is_file():
            return binary
        env = {**os.environ, "GOBIN": str(folder), "GOFLAGS": "-mod=mod"}
        try:
            proc = subprocess.run([go, "install", f"{GOFAKES3_MODULE}@{GOFAKES3_VERSION}"], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ObjectStoreError(f"go install {GOFAKES3_MODULE}@{GOFAKES3_VERSION} took over {timeout:.0f} s") \
                from None
        if proc.returncode != 0 or not binary.is_file():
            raise ObjectStoreError(f"go install {GOFAKES3_MODULE}@{GOFAKES3_VERSION} failed (exit {proc.returncode}):"
                                   f"\n{(proc.stdout + proc.stderr)[-3000:]}")
    return binary


class DiskS3Server(S3Server):
    """gofakes3 on 127.0.0.1, its objects in ``<folder>/objects.bolt`` (a free port, kept across restarts)."""

    name = "s3-disk-server"
    client_properties = {"s3.chunked-encoding-enabled": "false"}

    def __init__(self, folder, *, clock: str | None = None, **kwargs):
        super().__init__(folder, **kwargs)
        self.clock = clock

    def prepare(self) -> None:
        self._binary = gofakes3_binary()

    @property
    def objects_file(self) -> Path:
        return self.folder / "objects.bolt"

    def command(self, port: int) -> list[str]:
        return [str(self._binary), "-backend", "bolt", "-bolt.db", str(self.objects_file),
                "-host", f"127.0.0.1:{port}", "-quiet", *(["-time", self.clock] if self.clock else [])]

"""An S3-compatible object store on loopback: moto's server (``moto[server]`` from PyPI), a
process of its own, for the tests and a demo profile of a lake on object storage.

What flows through: a folder (its log) goes in; an endpoint ``http://127.0.0.1:<port>`` comes
out, that speaks the S3 API with path-style addressing (``http://host:port/<bucket>/<key>``),
as Iceberg's S3FileIO (``s3.endpoint``, ``s3.path-style-access``) and PyIceberg's pyarrow
FileIO (``s3.endpoint``) reach it.

What this module guarantees (besides `resources.demo_objstore.process`'s):

* The store is moto's S3 server, a real HTTP server in its own process, never a mock inside
  the caller. It accepts any access key and secret (it checks no signature), keeps objects in
  its memory, and loses them when it stops: a restart is a new, empty store.
* `make_bucket(name)` creates a bucket with one HTTP PUT (a timeout on it; an existing bucket of
  ours is fine). Its own requests carry no credentials: moto needs none, so no secret is ever
  written by this module.

moto is a development dependency (``pip install -e '.[dev]'``); `S3Server` fails with a clear
`ObjectStoreError` where it is missing.
"""

from __future__ import annotations

import importlib.util
import sys
import urllib.error
import urllib.request

from resources.demo_objstore.process import LoopbackProcess, ObjectStoreError

__all__ = ["S3Server"]

REQUEST_TIMEOUT = 10.0  # seconds, every request this module makes to the store


class S3Server(LoopbackProcess):
    """moto's S3 server on 127.0.0.1 (a free port, kept across restarts)."""

    name = "s3-server"
    # What an S3FileIO of this store (Spark's, the REST catalog server's) needs besides the usual.
    client_properties: dict[str, str] = {}

    def prepare(self) -> None:
        if importlib.util.find_spec("moto") is None:
            raise ObjectStoreError("the S3 test server needs moto's server: pip install -e '.[dev]' "
                                   "(moto[server] is a development dependency)")

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise ObjectStoreError("the S3 server is not started")
        return f"http://127.0.0.1:{self.port}"

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (path style, no credentials: moto checks none); returns ``s3://name``."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT", data=b"")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            if exc.code != 409 or "BucketAlreadyOwnedByYou" not in body:
                raise ObjectStoreError(f"creating bucket {name!r} at {self.endpoint} failed: HTTP {exc.code} "
                                       f"{body[:500]}") from None
        except OSError as exc:
            raise ObjectStoreError(f"creating bucket {name!r} at {self.endpoint} failed: {exc}") from None
        return f"s3://{name}"

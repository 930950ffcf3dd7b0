"""Where `deltaport demo` keeps its lake: a Hadoop catalog in the demo folder (``--lake local``),
or object storage behind a REST catalog (``--lake s3``), the deployment docs/operating.md
"Where the lake lives" describes, on loopback.

What flows through: the kind goes in; the `lake:` block of the demo's deltaport.yaml comes out,
valid while the context is open. For ``s3``: moto's S3 server (a development dependency,
installed by `make demo`) and Iceberg's REST catalog server (its jars from `make jars`), both in
``<state>/demo-s3`` (wiped at each start, as the demo folder is), stopped when the demo stops.

What this module guarantees: the store's secret key is random per demo, lives only in
``$DELTAPORT_DEMO_S3_SECRET`` (set here, inherited by `dagster dev` and its runs) and is named in
the file as ``{env: ...}``, as a deployment names its own. No environment is read at import.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from platform_assets.cli.common import state_dir

__all__ = ["LAKES", "SECRET_ENV", "demo_lake"]

LAKES = ("local", "s3")
SECRET_ENV = "DELTAPORT_DEMO_S3_SECRET"
LOCAL = {"catalog": "lake", "type": "hadoop", "warehouse": "lake"}


@contextmanager
def demo_lake(kind: str) -> Iterator[dict]:
    """The demo's `lake:` block; for ``s3`` the store and the catalog run until the block ends."""
    if kind == "local":
        yield dict(LOCAL)
        return
    if kind != "s3":
        raise ValueError(f"--lake is one of {', '.join(LAKES)}, not {kind!r}")
    from resources.demo_objstore.rest_catalog import S3_FILE_IO, RestCatalogServer
    from resources.demo_objstore.s3_server import S3Server

    folder = (state_dir() / "demo-s3").resolve()
    shutil.rmtree(folder, ignore_errors=True)
    os.environ[SECRET_ENV] = "demo" + secrets.token_hex(16)
    with S3Server(folder / "store") as store:
        bucket = store.make_bucket("lake")
        s3 = {"s3.endpoint": store.endpoint, "s3.path-style-access": "true", "s3.access-key-id": "demo",
              "client.region": "us-east-1"}
        with RestCatalogServer(folder / "catalog", warehouse=f"{bucket}/warehouse",
                               properties={**s3, "s3.secret-access-key": os.environ[SECRET_ENV]}) as catalog:
            print(f"lake: Iceberg's REST catalog at {catalog.uri}, files in {catalog.warehouse} on moto's S3 "
                  f"server at {store.endpoint}", flush=True)
            yield {"catalog": "lake", "type": "rest", "uri": catalog.uri, "warehouse": catalog.warehouse,
                   "properties": {**s3, "io-impl": S3_FILE_IO, "s3.secret-access-key": {"env": SECRET_ENV}}}

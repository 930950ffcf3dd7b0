"""Apache Iceberg's REST catalog server on loopback, its tables' files on object storage: the
catalog service the tests (and a demo profile) put in front of an S3-compatible store.

What flows through: a folder (the catalog's SQLite file, the log), a warehouse
(``s3://bucket/prefix``) and the FileIO's properties (``s3.endpoint``, keys) go in; a REST
endpoint ``http://127.0.0.1:<port>`` comes out, for ``lake: {type: rest, uri: ...}``.

What this module guarantees (besides `resources.demo_objstore.process`'s):

* The server is Iceberg's own (``RESTCatalogServer``'s parts from Maven Central, version
  `ICEBERG_VERSION`; `rest_jars`), started by a launcher that binds it to 127.0.0.1 only. Its
  backend is Iceberg's JdbcCatalog on ``<folder>/catalog.sqlite``: the catalog survives a
  restart of the server (what the store holds is the store's business). It writes table metadata
  through S3FileIO; clients write data files and manifests through their own FileIO.
* Properties reach the server as ``CATALOG_*`` environment variables, as RESTCatalogServer
  reads them (``s3.path-style-access`` -> ``CATALOG_S3_PATH__STYLE__ACCESS``), never on its
  command line. Its log level is WARN: at INFO it prints every backend property, secret key
  included.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from resources.demo_objstore.process import LoopbackProcess, ObjectStoreError
from resources.demo_objstore.rest_jars import LAUNCHER_CLASS, rest_catalog_classpath
from resources.java import require_java

__all__ = ["S3_FILE_IO", "RestCatalogServer", "catalog_env_name"]

S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# Small and quick to start: the catalog serves a few requests per commit.
JVM_OPTIONS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def catalog_env_name(prop: str) -> str:
    """The variable RESTCatalogServer reads a catalog property from (RCKUtils: ``__`` -> ``-``,
    ``_`` -> ``.``, lower-cased): ``s3.path-style-access`` -> ``CATALOG_S3_PATH__STYLE__ACCESS``."""
    if "_" in prop:
        raise ValueError(f"RESTCatalogServer cannot be given a property with '_' through its environment: {prop!r}")
    return "CATALOG_" + prop.replace("-", "__").replace(".", "_").upper()


class RestCatalogServer(LoopbackProcess):
    """Iceberg's REST catalog server on 127.0.0.1 (a free port, kept across restarts).

    `warehouse`: where new tables go (``s3://bucket/prefix``). `properties`: the backend
    catalog's and its FileIO's (``s3.endpoint``, ``s3.path-style-access``, ``s3.access-key-id``,
    ``s3.secret-access-key``, ``client.region``); ``io-impl`` defaults to S3FileIO.
    """

    name = "rest-catalog"

    def __init__(self, folder: str | Path, *, warehouse: str, properties: Mapping[str, str] | None = None,
                 start_timeout: float = 90.0, stop_timeout: float = 10.0):
        super().__init__(folder, start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.warehouse = warehouse
        self.properties = {"io-impl": S3_FILE_IO, **{str(k): str(v) for k, v in (properties or {}).items()}}
        self._classpath: list[Path] = []

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def catalog_db(self) -> Path:
        return self.folder / "catalog.sqlite"

    def prepare(self) -> None:
        if not self._classpath:
            self._classpath = rest_catalog_classpath()

    def command(self, port: int) -> list[str]:
        return [require_java(ObjectStoreError, "start the REST catalog"), *JVM_OPTIONS, "-cp", os.pathsep.join(map(str, self._classpath)), LAUNCHER_CLASS]

    def env(self, port: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update({"REST_HOST": "127.0.0.1", "REST_PORT": str(port),
                    catalog_env_name("uri"): f"jdbc:sqlite:{self.catalog_db}",
                    catalog_env_name("warehouse"): self.warehouse})
        env.update({catalog_env_name(k): v for k, v in self.properties.items()})
        return env

"""`deltaport demo --lake s3`'s lake (platform_assets/cli/demo_lake.py): the `lake:` block it
yields passes the config's checks (REST catalog, s3 warehouse, the secret as {env: NAME}), a
client writes and reads a table through it (PyIceberg: the REST catalog creates the table, its
files land in the demo's bucket), and both servers are gone when the block ends. The whole demo
on it (`deltaport demo --once --lake s3`) is run by hand (docs/operating.md); this is its part
that `make test` can afford: no broker, no Spark.

Real Iceberg REST server, real S3 API (moto's server).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
import yaml

from platform_assets.cli.demo_lake import SECRET_ENV, demo_lake
from platform_assets.config import parse_config, resolve_secret
from platform_assets.engine import pyiceberg_tables
from resources.lake.pyiceberg_read import open_catalog

pytestmark = pytest.mark.integration


def _listens(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((parts.hostname, parts.port)) == 0


def test_the_demo_s3_lake_takes_a_table_and_stops_with_the_demo(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTAPORT_STATE_DIR", str(tmp_path))
    with demo_lake("s3") as lake:
        assert lake["type"] == "rest" and lake["warehouse"].startswith("s3://")
        assert lake["properties"]["s3.secret-access-key"] == {"env": SECRET_ENV}
        cfg = parse_config({"sources": [{"name": "marketing", "format": "prostore", "backup_topic": "b"}],
                            "kafka": {"bootstrap_servers": "127.0.0.1:9"}, "lake": lake,
                            "state_dir": str(tmp_path / "state")}, str(tmp_path / "deltaport.yaml"))
        props = {k: str(resolve_secret(v)) for k, v in cfg.lake.properties.items()}
        catalog = open_catalog(type="rest", catalog=cfg.lake.catalog, warehouse=cfg.lake.warehouse,
                               uri=cfg.lake.uri, properties=props)
        catalog.create_namespace("demo_check")
        rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
        catalog.create_table("demo_check.t", rows.schema).append(rows)
        table = pyiceberg_tables(cfg)("demo_check.t")
        assert table.scan().to_arrow().column("id").to_pylist() == [1, 2, 3]
        assert table.metadata_location.startswith(f"{lake['warehouse']}/demo_check/t/")
        assert resolve_secret({"env": SECRET_ENV}) not in yaml.safe_dump(lake)
        endpoints = [lake["uri"], lake["properties"]["s3.endpoint"]]
        assert all(_listens(u) for u in endpoints)
    assert not any(_listens(u) for u in endpoints)

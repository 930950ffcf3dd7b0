"""A lake on object storage for the tests: the `lake:` block of deltaport.yaml for Iceberg's REST
catalog server in front of moto's S3 server (both started by tests/integration/conftest.py), and
what the store holds (listed through its S3 API, boto3).

The store's secret key and the catalog's credential are random per test session, live only in
$DELTAPORT_TEST_S3_SECRET and $DELTAPORT_TEST_CATALOG_CREDENTIAL, and are named in the config as
``{env: ...}``: a test can grep everything a run wrote for them.
"""

from __future__ import annotations

import secrets

from resources.demo_objstore.rest_catalog import S3_FILE_IO, RestCatalogServer
from resources.demo_objstore.s3_server import S3Server

SECRET_ENV = "DELTAPORT_TEST_S3_SECRET"
# The catalog's OAuth2 client credential (client_id:client_secret): Iceberg's test server grants a
# token for any, as a Polaris or a Gravitino grants one for theirs.
CREDENTIAL_ENV = "DELTAPORT_TEST_CATALOG_CREDENTIAL"
ACCESS_KEY = "deltaport-test"  # not a secret: it names the key, as an AWS access key id does
REGION = "us-east-1"


def new_secret() -> str:
    # Letters and digits only, long: no false match when grepping files for it.
    return "dps3" + secrets.token_hex(20)


def s3_properties(endpoint: str, secret: str) -> dict[str, str]:
    """S3FileIO's properties (the Java names; PyIceberg reads the same ones) for a store at `endpoint`."""
    return {"s3.endpoint": endpoint, "s3.path-style-access": "true", "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": secret, "client.region": REGION}


def rest_lake(catalog: RestCatalogServer, endpoint: str, name: str, store: S3Server | None = None) -> dict:
    """The `lake:` block of a deltaport.yaml on `catalog` and the store at `endpoint` (with what
    `store`'s clients need), the secret as {env: NAME}."""
    props: dict = {k: v for k, v in s3_properties(endpoint, "").items() if k != "s3.secret-access-key"}
    props.update(store.client_properties if store is not None else {})
    props.update({"io-impl": S3_FILE_IO, "s3.secret-access-key": {"env": SECRET_ENV},
                  "credential": {"env": CREDENTIAL_ENV}, "oauth2-server-uri": f"{catalog.uri}/v1/oauth/tokens"})
    return {"catalog": name, "type": "rest", "uri": catalog.uri, "warehouse": catalog.warehouse,
            "properties": props}


def s3_client(store: S3Server):
    """boto3's S3 client of `store` itself (not through a proxy)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=store.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key="unused-moto-checks-no-signature",
                        config=Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 2}))


def list_keys(store: S3Server, bucket: str, prefix: str = "") -> list[str]:
    """Every object key of `bucket` under `prefix` (a listing by prefix, as orphan removal does)."""
    keys: list[str] = []
    for page in s3_client(store).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def unreferenced_keys(spark, catalog: str, namespaces: list[str], keys: list[str], bucket: str) -> list[str]:
    """The keys under the tables of `namespaces` that no metadata of theirs references (every
    snapshot's data and delete files, manifests, manifest lists, and the metadata files in the
    log): what a crashed writer left, what orphan removal is for."""
    referenced, prefixes = set(), []
    for ns in namespaces:
        for (table,) in [(r.tableName,) for r in spark.sql(f"SHOW TABLES IN {catalog}.{ns}").collect()]:
            ident = f"{catalog}.{ns}.{table}"
            location = next(r["data_type"] for r in spark.sql(f"DESCRIBE TABLE EXTENDED {ident}").collect()
                            if r["col_name"] == "Location")
            prefixes.append(location.removeprefix(f"s3://{bucket}/").rstrip("/") + "/")
            for query in (f"SELECT file_path AS p FROM {ident}.all_files",
                          f"SELECT path AS p FROM {ident}.all_manifests",
                          f"SELECT manifest_list AS p FROM {ident}.snapshots",
                          f"SELECT file AS p FROM {ident}.metadata_log_entries"):
                referenced |= {r["p"].removeprefix(f"s3://{bucket}/") for r in spark.sql(query).collect()}
    return sorted(k for k in keys if k.startswith(tuple(prefixes)) and k not in referenced)

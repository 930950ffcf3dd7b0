"""The object-store test servers' pure parts: how RESTCatalogServer is given properties, which
requests the fault proxy fails and how it names them, and the POMs kept in step with the
Iceberg version (no process is started here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fault_proxy import FAULT_KINDS, FaultProxy, operation
from resources.demo_objstore.rest_catalog import catalog_env_name
from resources.spark.jars import ICEBERG_VERSION

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("prop", "env"), [
    ("s3.path-style-access", "CATALOG_S3_PATH__STYLE__ACCESS"),
    ("s3.secret-access-key", "CATALOG_S3_SECRET__ACCESS__KEY"),
    ("io-impl", "CATALOG_IO__IMPL"),
    ("client.region", "CATALOG_CLIENT_REGION"),
    ("uri", "CATALOG_URI"),
])
def test_properties_reach_the_rest_server_as_its_catalog_variables(prop, env):
    assert catalog_env_name(prop) == env
    # RCKUtils.environmentCatalogConfig, the way back:
    assert env.removeprefix("CATALOG_").replace("__", "-").replace("_", ".").lower() == prop


def test_a_property_with_an_underscore_cannot_be_passed_and_says_so():
    with pytest.raises(ValueError, match="'_'"):
        catalog_env_name("jdbc.schema_version")


@pytest.mark.parametrize(("method", "target", "op"), [
    ("GET", "/bucket?list-type=2&prefix=wh%2F", "LIST"),
    ("GET", "/bucket/", "LIST"),
    ("GET", "/bucket/wh/t/metadata/v1.metadata.json", "GET"),
    ("HEAD", "/bucket/wh/t/data/f.parquet", "HEAD"),
    ("PUT", "/bucket/wh/t/data/f.parquet", "PUT"),
    ("POST", "/bucket/wh/big.parquet?uploads", "POST"),
    ("DELETE", "/bucket/wh/orphan.parquet", "DELETE"),
])
def test_requests_are_named_by_what_they_do_to_the_store(method, target, op):
    assert operation(method, target) == op


def test_faults_hit_one_request_in_every_cycle_the_kinds_never_twice_in_a_row_and_stop_at_the_bound():
    proxy = FaultProxy("http://127.0.0.1:9", every=3, max_faults=6)
    assert [proxy._plan("GET", f"/b/k{i}") for i in range(3)] == [None, None, None]  # not armed
    proxy.arm()
    plan = [proxy._plan("GET", f"/b/k{i}") for i in range(30)]
    faults = [(i, kind) for i, kind in enumerate(plan) if kind]
    assert faults == [(2, "503"), (5, "reset"), (8, "reset_after"), (11, "delay"), (14, "503"), (17, "reset")]
    assert all(b - a >= 3 for (a, _), (b, _) in zip(faults, faults[1:]))
    assert sum(proxy.faults.values()) == 6 and proxy.counts["GET"] == 33
    assert set(FAULT_KINDS) == set(proxy.faults)


def test_a_fault_is_paired_with_the_clients_next_attempt_at_the_same_request():
    proxy = FaultProxy("http://127.0.0.1:9", every=2)
    proxy.arm()
    proxy._plan("PUT", "/b/a")
    assert proxy._plan("PUT", "/b/x") == "503"
    proxy._plan("GET", "/b/a")
    proxy._plan("PUT", "/b/x")  # the retry
    assert [(kind, op, target) for kind, op, target, _ in proxy.retries()] == [("503", "PUT", "/b/x")]


def test_refused_puts_are_those_of_the_suffix_armed_or_not_until_lifted():
    proxy = FaultProxy("http://127.0.0.1:9", every=2)
    proxy.refuse(".metadata.json")
    assert proxy._plan("PUT", "/b/wh/t/metadata/00001-x.metadata.json?x-id=PutObject") == "refused"
    assert proxy._plan("GET", "/b/wh/t/metadata/00001-x.metadata.json") is None  # reads go through
    assert proxy._plan("PUT", "/b/wh/t/data/f.parquet") is None
    proxy.refuse(None)
    assert proxy._plan("PUT", "/b/wh/t/metadata/00002-y.metadata.json") is None
    assert proxy.refused == 1 and not proxy.faults


@pytest.mark.parametrize("pom", ["resources/demo_objstore/pom.xml", "resources/spark/aws-pom.xml",
                                 "resources/spark/pom.xml"])
def test_every_pom_names_the_iceberg_version_of_the_spark_runtime(pom):
    text = (ROOT / pom).read_text()
    assert re.search(r"<iceberg.version>([^<]+)</iceberg.version>", text).group(1) == ICEBERG_VERSION


@pytest.mark.parametrize("upstream", ["https://127.0.0.1:9000", "127.0.0.1:9000", "http://127.0.0.1"])
def test_the_proxy_forwards_to_plain_http_host_and_port_only(upstream):
    with pytest.raises(ValueError, match="http://host:port"):
        FaultProxy(upstream)

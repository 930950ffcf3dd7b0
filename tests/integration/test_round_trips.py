"""The benchmark's round-trip counter (bench/round_trips.py) on a real Spark Connect session: it
counts each RPC once, by kind, files it under deltaport's own call site, and leaves the client
as it was."""

from __future__ import annotations

import pytest

from bench.round_trips import counting_round_trips
from resources.spark.iceberg import table_exists

pytestmark = pytest.mark.integration


def test_round_trips_are_counted_by_kind_and_call_site_and_the_client_is_restored(spark, lake_ns):
    from pyspark.sql.connect.client import core

    before = core.SparkConnectClient._analyze
    with counting_round_trips() as trips:
        assert spark.sql("SELECT 1 AS one").collect()[0].one == 1
        assert spark.range(3).schema.names == ["id"]
        assert table_exists(spark, f"{lake_ns}.nowhere") is False
    assert core.SparkConnectClient._analyze is before
    assert trips.calls["execute"] >= 2 and trips.calls["analyze"] >= 1, trips.calls
    sites = trips.to_dict(top=50)["top_sites"]
    # filed under the deltaport function that made the call: existence's lookup behind table_exists
    assert any(s["site"].startswith("execute resources/spark/existence.py:")
               and s["site"].endswith((" table_exists", " _remembered")) for s in sites), sites
    assert trips.to_dict()["round_trips"] == trips.total == sum(s["calls"] for s in sites)
    with counting_round_trips() as idle:
        pass
    spark.sql("SELECT 2").collect()  # after the block: not counted
    assert idle.total == 0

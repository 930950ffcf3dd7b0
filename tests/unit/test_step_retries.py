"""A step that fails on something a retry may cure runs again in its run; one that fails on
something a retry cannot cure fails at once (no minutes of pointless retries on bad config)."""

from __future__ import annotations

from types import SimpleNamespace

import dagster as dg

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.prostore.assets import STEP_RETRY, asset_failure
from resources.errors import DeltaportError
from resources.spark.session import SparkServerUnavailable, SparkSessionError
from resources.state.store import StateStoreError, StateStoreUnavailable


def test_every_landing_step_has_the_retry_policy():
    defs = build_definitions(parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b"},
                                                       {"name": "q", "format": "qlik", "topic": "t"}]}))
    nodes = [n for n in defs.resolve_asset_graph().asset_nodes if n.is_partitioned]
    assert len(nodes) == 7
    policies = {n.key.to_user_string(): n.assets_def.node_def.retry_policy for n in nodes}
    assert all(p == STEP_RETRY for p in policies.values()), policies
    assert STEP_RETRY.max_retries == 2


def test_only_transient_errors_are_retried():
    ctx = SimpleNamespace(asset_key=dg.AssetKey(["dm", "snapshot"]), partition_key="00000003")
    assert asset_failure(ctx, StateStoreUnavailable("state store x: the connection was lost")).allow_retries
    assert asset_failure(ctx, SparkServerUnavailable("no Spark Connect server answers")).allow_retries
    assert not asset_failure(ctx, StateStoreError("schema version 3; upgrade deltaport")).allow_retries
    assert not asset_failure(ctx, SparkSessionError("no Iceberg extensions")).allow_retries
    assert not asset_failure(ctx, DeltaportError("anything else on purpose")).allow_retries

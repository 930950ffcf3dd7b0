"""A datamart's tables as catalog entries of their own (platform_assets/lake_tables.py): the stored
list, the external specs built from it, and the round trip through a real Dagster instance's defs
state storage (a temporary DAGSTER_HOME: SQLite run storage, files under storage/defs_state)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import dagster as dg
import pytest

from platform_assets.config import load_config
from platform_assets.definitions import build_definitions
from platform_assets.lake_tables import (decode, encode, load_tables, merged, remember_tables, state_key,
                                         table_key, table_specs, tables_group)
from platform_assets.prostore.delta_step import table_columns
from tests.support.defs_state import defs_state

ROOT = Path(__file__).resolve().parents[2]
SALES = {"sales": [("id", "bigint"), ("store_id", "int")], "stores": [("id", "bigint"), ("name", "varchar(100)")]}


def test_encode_decode_round_trip_and_foreign_format():
    text = encode({"stores": SALES["stores"], "sales": SALES["sales"]}, 7)
    assert text == encode(SALES, 7)  # the same tables in any order: the same text
    assert decode(text) == (7, SALES)
    assert decode('{"format": 99, "delta": 3, "tables": {"x": []}}') == (-1, {})


def test_merged_keeps_known_columns_of_tables_the_run_left_alone():
    known = {"a": [("x", "int")], "b": [("y", "string")]}
    seen = {"b": [("y", "string"), ("z", "int")], "c": [("w", "int")], "a": None}
    assert merged(known, seen) == {"a": [("x", "int")], "b": [("y", "string"), ("z", "int")], "c": [("w", "int")]}
    assert merged(known, seen, tables={"a", "c"}) == {"a": [("x", "int")], "c": [("w", "int")]}


def test_table_columns_from_a_changelog():
    from resources.codecs.backup import ChangelogRecord

    records = [ChangelogRecord(1, "sales", "CREATE TABLE sales (id bigint not null, label varchar(20), "
                                           "PRIMARY KEY (id)) DISTRIBUTED BY (id)")]
    assert table_columns(records) == {"sales": [("id", "bigint"), ("label", "varchar(20)")]}


def test_table_specs_are_external_assets_with_table_metadata():
    specs = table_specs("marketing", SALES, upstream=dg.AssetKey(["marketing", "snapshot"]),
                        ident=lambda t: f"lake.marketing.{t}", uri=lambda ident: f"file:///lake/{ident}")
    assert [s.key for s in specs] == [table_key("marketing", "sales"), table_key("marketing", "stores")]
    sales = specs[0]
    assert sales.key.to_user_string() == "marketing/tables/sales"  # what the catalog's search box matches
    assert sales.group_name == tables_group("marketing") and sales.kinds == {"iceberg"}
    assert [d.asset_key for d in sales.deps] == [dg.AssetKey(["marketing", "snapshot"])]
    assert sales.metadata["dagster/table_name"] == "lake.marketing.sales"
    assert [(c.name, c.type) for c in sales.metadata["dagster/column_schema"].columns] == SALES["sales"]
    assert sales.tags["deltaport/table"] == "lake.marketing.sales"
    defs = dg.Definitions(assets=specs)
    assert not defs.resolve_assets_def(sales.key).is_executable


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        yield inst


def test_the_step_stores_the_list_only_when_it_changes(instance):
    context = dg.build_asset_context(instance=instance)
    storage = instance.defs_state_storage
    key = state_key("marketing")
    assert remember_tables(context, "marketing", SALES, SALES, delta=3) is None  # as the definitions knew it
    assert storage.get_latest_version(key) is None

    said = remember_tables(context, "marketing", SALES, {}, delta=3)  # a first delta: stored
    assert said and "new: sales, stores" in said and "Reload" in said
    first = storage.get_latest_version(key)
    assert first is not None
    # Stored already, the code location not reloaded since: nothing written.
    assert remember_tables(context, "marketing", SALES, {}, delta=4) is None
    assert storage.get_latest_version(key) == first
    # A re-run of an older delta does not bring back an older list.
    assert remember_tables(context, "marketing", {"sales": SALES["sales"]}, SALES, delta=2) is None
    # A DDL change: a new version, the table gone named.
    said = remember_tables(context, "marketing", {"sales": SALES["sales"]}, SALES, delta=5)
    assert said and "gone: stores" in said
    assert storage.get_latest_version(key) not in (None, first)
    # A change stream's run sees some of its tables: the list it updates is the latest stored, not the loaded one.
    grow = lambda base: merged(base, {"c": [("w", "int")]}, set(base) | {"c"})  # noqa: E731
    said = remember_tables(context, "marketing", grow, {}, delta=7)
    assert said and "new: c" in said and "sales" not in said
    assert remember_tables(context, "marketing", grow, {}, delta=8) is None
    with defs_state(instance):
        assert load_tables("marketing") == {"sales": SALES["sales"], "c": [("w", "int")]}
    # The latest version not readable here (stored from another host on a folder of its own): stored again.
    shutil.rmtree(str(storage.base_path))
    assert remember_tables(context, "marketing", {"sales": SALES["sales"]}, {}, delta=9)
    with defs_state(instance):
        assert load_tables("marketing") == {"sales": SALES["sales"]}


def test_definitions_list_the_stored_tables_and_load_without_them(instance, caplog):
    cfg = load_config(ROOT / "deltaport.yaml")
    with defs_state(instance):  # as the code server and run workers have it: its defs state storage in context
        assert load_tables("marketing") == {}
        defs = build_definitions(cfg)
        assert not [k for k in defs.resolve_asset_graph().get_all_asset_keys() if "tables" in k.path]

        remember_tables(dg.build_asset_context(instance=instance), "marketing", SALES, {}, delta=1)
        assert load_tables("marketing") == SALES
        defs = build_definitions(cfg)
        graph = defs.resolve_asset_graph()
        sales = table_key("marketing", "sales")
        assert graph.get(sales).is_external and graph.get(sales).group_name == "marketing_tables"
        assert dg.AssetKey(["marketing", "snapshot"]) in graph.get(sales).parent_keys
        # The delta job lands what it did: the table assets are in no job.
        job = defs.resolve_job_def("marketing_delta_job")
        assert sales not in job.asset_layer.selected_asset_keys
        assert dg.AssetKey(["marketing", "snapshot"]) in job.asset_layer.selected_asset_keys

        # An unreadable store: no table assets and a warning, never a failed load.
        shutil.rmtree(str(instance.defs_state_storage.base_path))
        with caplog.at_level(logging.WARNING, logger="platform_assets.lake_tables"):
            defs = build_definitions(cfg)
        assert not [k for k in defs.resolve_asset_graph().get_all_asset_keys() if "tables" in k.path]
        assert "could not be read" in caplog.text

"""What the UI shows as written: every description in the Definitions renders without a lost word.

Dagster's UI renders asset, check, job and sensor descriptions as Markdown, where a bare
`<table>` or `<N>` is an HTML tag: dropped, with the words around it ("(lake.marketing.) ...
tagged delta_."; issue 58). A placeholder belongs in a code span, where it renders as written.
"""

from __future__ import annotations

import re

import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.delta_metadata import TABLE_TAG, table_tags

# A tag as Markdown takes it: `<` a letter, then anything up to `>` on the same line.
TAG = re.compile(r"<[A-Za-z][^<>\n]*>")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def tags_outside_code(text: str) -> list[str]:
    return TAG.findall(CODE_SPAN.sub("", text or ""))


def _all_descriptions(defs) -> dict[str, str]:
    graph = defs.resolve_asset_graph()
    out = {f"asset {n.key.to_user_string()}": n.description for n in graph.asset_nodes}
    for node in graph.asset_nodes:
        for check in node.check_keys:
            spec = graph.get_check_spec(check)
            out[f"check {check.to_user_string()}"] = spec.description
    for job in defs.resolve_all_job_defs():
        out[f"job {job.name}"] = job.description
    for sensor in defs.sensors or []:
        out[f"sensor {sensor.name}"] = sensor.description
    for checks_def in defs.asset_checks or []:
        for spec in checks_def.check_specs:
            out[f"check {spec.key.to_user_string()}"] = spec.description
    return {k: v for k, v in out.items() if v}


def test_placeholders_outside_code_spans_are_found():
    assert tags_outside_code("tables (lake.m.<table>), tagged delta_<N>.") == ["<table>", "<N>"]
    assert tags_outside_code("tables (`lake.m.<table>`), tagged `delta_<N>`; 1 < 2 > 0") == []


@pytest.mark.parametrize("history", [True, False])
def test_no_description_of_the_definitions_loses_a_word(history):
    cfg = parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b", "history": history},
                                    {"name": "bo", "backup_topic": "b2"},
                                    {"name": "q", "format": "qlik", "topic": "t", "history": history}]})
    descriptions = _all_descriptions(build_definitions(cfg))
    assert any(k.startswith("asset dm/snapshot") for k in descriptions)
    assert any(k.startswith("check ") for k in descriptions)
    lost = {k: tags_outside_code(v) for k, v in descriptions.items() if tags_outside_code(v)}
    assert lost == {}


def test_single_table_assets_name_their_iceberg_table_for_the_catalog():
    cfg = parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b"},
                                    {"name": "q", "format": "qlik", "topic": "t"}]})
    nodes = {n.key.to_user_string(): n.metadata for n in build_definitions(cfg).resolve_asset_graph().asset_nodes}
    assert nodes["dm/signal_events"]["dagster/table_name"] == "lake.dm_meta.signal_events"
    assert "code" in [c.name for c in nodes["dm/signal_events"]["dagster/column_schema"].columns]
    assert nodes["dm/changelog"]["dagster/table_name"] == "lake.dm_meta.changelog"
    assert nodes["q/changelog"]["dagster/table_name"] == "lake.q_meta.changelog"


def test_single_table_assets_give_their_location_where_the_catalog_places_tables_by_name():
    sources = [{"name": "dm", "signal_topic": "s", "backup_topic": "b"}, {"name": "q", "format": "qlik", "topic": "t"}]
    nodes = {n.key.to_user_string(): n.metadata
             for n in build_definitions(parse_config({"sources": sources})).resolve_asset_graph().asset_nodes}
    uri = nodes["dm/signal_events"]["dagster/uri"]
    assert uri.startswith("file:///") and uri.endswith("/lake/dm_meta/signal_events")
    assert nodes["q/changelog"]["dagster/uri"].endswith("/lake/q_meta/changelog")
    rest = parse_config({"sources": sources, "lake": {"type": "rest", "uri": "http://127.0.0.1:1", "warehouse": "w"}})
    nodes = {n.key.to_user_string(): n.metadata for n in build_definitions(rest).resolve_asset_graph().asset_nodes}
    assert "dagster/uri" not in nodes["dm/signal_events"]  # the catalog chooses: not guessed


def test_single_table_assets_are_tagged_with_their_table_for_the_oss_catalog_search():
    sources = [{"name": "dm", "signal_topic": "s", "backup_topic": "b"}, {"name": "q", "format": "qlik", "topic": "t"}]
    graph = build_definitions(parse_config({"sources": sources})).resolve_asset_graph()
    tags = {n.key.to_user_string(): n.tags for n in graph.asset_nodes}
    assert tags["dm/signal_events"][TABLE_TAG] == "lake.dm_meta.signal_events"
    assert tags["q/changelog"][TABLE_TAG] == "lake.q_meta.changelog"
    assert TABLE_TAG not in tags["dm/snapshot"]  # a layer asset: its tables are in its `tables` entry
    assert table_tags("lake." + "x" * 70) == {} and table_tags("lake.a b") == {}  # not a valid tag value: none

"""resources/lake/pyiceberg_read.py on small Iceberg tables PyIceberg writes itself (a SQLite
catalog in a temporary folder; no Spark, no JVM): every Prostore history form at every delta and
every pair of deltas equals an oracle that walks the story's versions; tags, the newest metadata
of a Hadoop table folder, and the JDBC URLs turned into SQLAlchemy's."""

from __future__ import annotations

import datetime as dt
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from resources.lake.history_forms import AsOfDelta, FinishedIn, StartedIn
from resources.lake.as_of import DeltaNotLandedError
from resources.lake.pyiceberg_read import (
    DELTA_PROPERTY,
    DELTAS_PROPERTY,
    PyIcebergReadError,
    delta_snapshot_id,
    delta_tags,
    folded_deltas,
    last_delta,
    load_table,
    read_current,
    read_delta,
    read_history,
    sqlalchemy_url,
)

DELTAS = 8
CLOSE = {n: dt.datetime(2026, 1, 1) + dt.timedelta(hours=n) for n in range(DELTAS + 1)}
SNAPSHOT = pa.schema([("id", pa.int64()), ("v", pa.string()), ("sys_from", pa.int64()),
                      ("sys_from_date", pa.timestamp("us"))])
HISTORY = pa.schema([*SNAPSHOT, ("sys_to", pa.int64()), ("sys_op", pa.int32()),
                     ("sys_close_date", pa.timestamp("us")), ("delta_num", pa.int64())])


def story(seed: int = 3):
    """(current versions, closed versions, state after each delta) of random upserts and deletes
    on 6 keys over DELTAS deltas; keys 0 and 1 start as rows landed before history (sys_from null)."""
    rnd = random.Random(seed)
    current = {k: {"id": k, "v": f"old{k}", "sys_from": None, "sys_from_date": None} for k in (0, 1)}
    closed, states = [], {}
    for n in range(DELTAS):
        for k in rnd.sample(range(6), 3):
            if k in current:  # the delta closes the version current at n - 1
                op = rnd.choice((0, 1))
                closed.append({**current.pop(k), "sys_to": n - 1, "sys_op": op,
                               "sys_close_date": CLOSE[n], "delta_num": n})
                if op == 1:
                    continue
            current[k] = {"id": k, "v": f"{k}@{n}", "sys_from": n, "sys_from_date": CLOSE[n]}
        states[n] = {k: row["v"] for k, row in current.items()}
    return list(current.values()), closed, states


def oracle(form, current, closed) -> list[tuple]:
    rows = [{**r, "sys_to": None, "sys_op": 0} for r in current] + closed
    if isinstance(form, AsOfDelta):
        keep = [r for r in rows if (r["sys_from"] is None or r["sys_from"] <= form.delta)
                and (r["sys_to"] is None or r["sys_to"] >= form.delta)]
    elif isinstance(form, StartedIn):
        keep = [r for r in rows if r["sys_from"] is not None and form.first <= r["sys_from"] <= form.last]
    else:
        keep = [r for r in rows if r["sys_to"] is not None and form.first - 1 <= r["sys_to"] <= form.last - 1
                and r["sys_op"] == 1]
    return sorted((r["id"], r["v"], r["sys_from"], r["sys_to"], r["sys_op"]) for r in keep)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    from pyiceberg.catalog.sql import SqlCatalog

    root = tmp_path_factory.mktemp("pyice")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")
    catalog.create_namespace("dm")
    catalog.create_namespace("dm_history")
    current, closed, states = story()
    snap = catalog.create_table("dm.t", SNAPSHOT, location=f"file://{root}/wh/dm/t")
    snap.append(pa.Table.from_pylist(current, SNAPSHOT))
    hist = catalog.create_table("dm_history.t", HISTORY)
    hist.append(pa.Table.from_pylist(closed, HISTORY))
    return root, catalog, current, closed, states


FORMS = ([AsOfDelta(n) for n in range(DELTAS)]
         + [f(a, b) for f in (StartedIn, FinishedIn) for a in range(DELTAS) for b in range(a, DELTAS)])


def test_every_history_form_at_every_delta_and_pair_equals_the_versions_oracle(lake):
    root, _, current, closed, states = lake
    props = {"jdbc.user": "unused"}
    snap = load_table("lake.dm.t", type="jdbc", uri=f"jdbc:sqlite:{root}/catalog.db", properties=props)
    hist = load_table("dm_history.t", type="jdbc", uri=f"jdbc:sqlite:{root}/catalog.db", properties=props)
    assert any(r["sys_op"] == 1 for r in closed) and any(r["sys_op"] == 0 for r in closed)
    for form in FORMS:
        got = read_history(snap, hist, form)
        assert got.column_names == HISTORY.names, form
        rows = sorted((r["id"], r["v"], r["sys_from"], r["sys_to"], r["sys_op"]) for r in got.to_pylist())
        assert rows == oracle(form, current, closed), form
        if isinstance(form, AsOfDelta):  # and, read as a state, it is the story's state
            assert {r[0]: r[1] for r in rows} == states[form.delta], form
    finished = read_history(snap, hist, FinishedIn(0, DELTAS - 1))
    assert finished.num_rows and set(finished.column("sys_op").to_pylist()) == {1}


def test_tags_read_the_snapshot_they_name_and_the_last_delta_is_the_newest_on_the_current_snapshot(lake):
    _, catalog, *_ = lake
    table = catalog.create_table("dm.tagged", pa.schema([("id", pa.int64())]))
    assert last_delta(table) is None
    for n in range(3):
        table.append(pa.Table.from_pylist([{"id": n}], table.schema().as_arrow()))
        table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, f"delta_{n}").commit()
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "delta_3").commit()  # unchanged
    assert sorted(read_delta(table, 1).column("id").to_pylist()) == [0, 1]
    assert sorted(read_current(table).column("id").to_pylist()) == [0, 1, 2]
    assert delta_snapshot_id(table, 3) == table.current_snapshot().snapshot_id
    assert last_delta(table) == 3
    with pytest.raises(DeltaNotLandedError, match=r"delta 7 has not landed \(last landed: 3\)"):
        read_delta(table, 7)
    # Maintenance commits after the last delta (and may expire the commits between): the newest
    # tag is still the last delta, as Spark's reader finds it.
    table.append(pa.Table.from_pylist([], table.schema().as_arrow()))
    assert table.current_snapshot().snapshot_id != delta_snapshot_id(table, 3)
    assert last_delta(table) == 3


def test_a_delta_that_left_the_table_alone_reads_the_newest_tag_before_it_up_to_the_sources_mark(lake):
    """Issue 57: deltas 1 and 3 left the table alone (no tag); the source landed through 5 (its
    manifest's mark). Each delta reads the state it had, a delta above the mark is not landed, and
    without the mark (a lake written before it) the table's newest tag is the bound, as before."""
    _, catalog, *_ = lake
    table = catalog.create_table("dm.sparse", pa.schema([("id", pa.int64())]))
    for n in (0, 2, 4):
        table.append(pa.Table.from_pylist([{"id": n}], table.schema().as_arrow()))
        table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, f"delta_{n}").commit()
    states = {n: list(range(0, min(n, 4) + 1, 2)) for n in range(6)}  # the ids landed by delta n
    assert delta_tags(table).keys() == {0, 2, 4} and last_delta(table) == 4
    for n in range(6):
        assert sorted(read_delta(table, n, mark=5).column("id").to_pylist()) == states[n], n
    assert delta_snapshot_id(table, 3, mark=5) == delta_tags(table)[2]
    assert delta_snapshot_id(table, 5, mark=5) == table.current_snapshot().snapshot_id
    with pytest.raises(DeltaNotLandedError, match=r"delta 6 has not landed \(last landed: 5\)"):
        read_delta(table, 6, mark=5)
    with pytest.raises(DeltaNotLandedError, match=r"delta 5 has not landed \(last landed: 4\)"):
        read_delta(table, 5)
    # A range run's commit of deltas 5-6: delta 5 is inside it and no snapshot alone holds it.
    table.append(pa.Table.from_pylist([{"id": 6}], table.schema().as_arrow()),
                 snapshot_properties={DELTAS_PROPERTY: "5-6", DELTA_PROPERTY: "6"})
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "delta_6").commit()
    assert folded_deltas(table) == [(5, 6)]
    with pytest.raises(PyIcebergReadError, match="inside the range run's commit of deltas 5-6"):
        read_delta(table, 5, mark=6)
    assert sorted(read_delta(table, 4, mark=6).column("id").to_pylist()) == [0, 2, 4]


def test_a_hadoop_table_folder_opens_at_its_newest_metadata_even_past_a_stale_hint(lake, tmp_path):
    root, catalog, current, *_ = lake
    table = catalog.load_table("dm.t")
    metadata = Path(root) / "wh" / "dm" / "t" / "metadata"
    newest = Path(table.metadata_location.removeprefix("file://"))
    first = Path(sorted(metadata.glob("00000-*.metadata.json"))[0])
    shutil.copy(first, metadata / "v1.metadata.json")  # the empty table
    shutil.copy(newest, metadata / "v2.metadata.json")  # with its rows
    (metadata / "version-hint.text").write_text("1")  # a writer died before updating it
    opened = load_table("lake.dm.t", type="hadoop", warehouse=str(root / "wh"))
    assert opened.metadata_location.endswith("/v2.metadata.json")
    assert read_current(opened).num_rows == len(current)
    (metadata / "version-hint.text").unlink()  # no hint at all: the highest version in the folder
    assert load_table("dm.t", type="hadoop", warehouse=f"file://{root}/wh").metadata_location.endswith("v2.metadata.json")
    with pytest.raises(PyIcebergReadError, match="dm.nothing does not exist in the hadoop warehouse"):
        load_table("dm.nothing", type="hadoop", warehouse=str(root / "wh"))


def test_jdbc_urls_become_sqlalchemy_urls_and_a_missing_table_is_named(lake):
    assert sqlalchemy_url("jdbc:postgresql://127.0.0.1:5432/cat?sslmode=require",
                          {"jdbc.user": "dp", "jdbc.password": "p@ss/word"}) == \
        "postgresql+psycopg2://dp:p%40ss%2Fword@127.0.0.1:5432/cat?sslmode=require"
    assert sqlalchemy_url("jdbc:sqlite:file:/var/lake/catalog.db", {}) == "sqlite:////var/lake/catalog.db"
    with pytest.raises(PyIcebergReadError, match="PostgreSQL or SQLite"):
        sqlalchemy_url("jdbc:mysql://h/db", {})
    root = lake[0]
    with pytest.raises(PyIcebergReadError, match="lake.dm.missing does not exist in the SqlCatalog"):
        load_table("dm.missing", type="jdbc", uri=f"jdbc:sqlite:{root}/catalog.db")
    with pytest.raises(PyIcebergReadError, match="ns.table"):
        load_table("justaname", type="jdbc", uri=f"jdbc:sqlite:{root}/catalog.db")

"""Prostore's FOR SYSTEM_TIME forms on the lake's history, against an oracle built from the truth
(issue 28).

Two stories, each landed with the lake layer (changelog, increments, snapshots; no Dagster):
- the emulator's `marketing` (seed 2): delta 2's first try is cancelled and its number reused, a
  column is added before delta 2, one renamed and one dropped before delta 4; deltas 0-1 land one
  by one, 2-4 and 5-6 as range runs (5-6 fold into one MERGE, 2-4 split at the column changes);
- a synthetic table whose keys are deleted and inserted again, updated twice, deleted and
  re-inserted in consecutive deltas, in one fold (the emulator never re-inserts a deleted key).
The oracle follows the versions as Prostore keeps them (docs/prostore-system-time.md): each change
of a key closes its current version at the delta before (`sys_to`), stamped `sys_op = 1` when the
change is a delete, and an upsert starts a version (`sys_from`); a version's values are the row as
it was last current. Then, at every delta and for every pair (a, b):
- `AS OF DELTA_NUM n` (`rows_as_of`, which reads the history) equals the truth at n;
- `STARTED IN (a, b)` and `FINISHED IN (a, b)` (`versions_in`) equal the oracle's versions, in the
  columns of delta b's DDL (a column a version never had reads None);
- the same rows come back from plain Spark SQL on the two tables, with the WHERE text the docs show,
  and from PyIceberg (no JVM) with the same text;
- `deltaport read --engine pyiceberg` prints what the Spark engine prints for every form, at every
  delta (those inside a fold, and one whose tag was dropped, read from the history).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from itertools import combinations_with_replacement

import pytest
import yaml

from platform_assets.cli import main

from resources.codecs.backup import ChangelogRecord
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.lake.history_forms import FinishedIn, StartedIn, history_where
from resources.lake.layout import LakeLayout
from resources.lake.prostore import land_changelog, land_increment
from resources.lake.prostore_history import history_ident
from resources.lake.pyiceberg_read import load_table, read_history
from resources.lake import prostore_snapshot
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of, versions_in
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect
from tests.support.landing import land_delta, published_backup
from tests.support.read_engines import read_with_both_engines

pytestmark = pytest.mark.integration

DM = "marketing"
CONFIG = EmulatorConfig(seed=2, deltas=7, datamarts=(DM,), column_changes_at_delta=2, ddl_at_delta=None,
                        streams=2, chunk_size=5, backup_partitions=2, faults=Faults(duplicate_rate=0.05))
SYS = ("sys_from", "sys_to", "sys_op")


@pytest.fixture(scope="module")
def lake(spark_remote, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("history-lake")
    return connect(spark_remote, CatalogConfig(name="hist", warehouse=str(warehouse))), LakeLayout("hist"), warehouse


def oracle_versions(deltas, changes_of, key_of):
    """Every version of one table: dicts {key, sys_from, sys_to, sys_op}. `changes_of(d)`: delta
    d's changes as (row, sys_op)."""
    versions, open_ = [], {}
    for i, d in enumerate(deltas):
        for row, op in changes_of(d):
            key = key_of(row)
            if key in open_:
                v = open_.pop(key)
                versions.append({**v, "sys_to": d - 1, "sys_op": op})
            if op == 0:
                open_[key] = {"key": key, "sys_from": d}
    return versions + [{**v, "sys_to": None, "sys_op": 0} for v in open_.values()]


def expected(versions, form, columns, state_at, last):
    """The versions `form` selects, each with its values as of the range's last delta if it was
    current then, else as of the last delta it was current in (a version's values never change:
    these are the names and columns it had then), in `columns`. `state_at(d)`: {key: row}."""
    if isinstance(form, StartedIn):
        chosen = [v for v in versions if form.first <= v["sys_from"] <= form.last]
    else:
        chosen = [v for v in versions if v["sys_op"] == 1 and form.first - 1 <= v["sys_to"] <= form.last - 1]
    chosen.sort(key=lambda v: (v["key"], v["sys_from"]))
    def values(v):
        return state_at(min(last if v["sys_to"] is None else v["sys_to"], form.last))[v["key"]]

    return [{**{c: values(v).get(c) for c in columns}, **{s: v[s] for s in SYS}} for v in chosen]


def check_every_form(session, layout, warehouse, dm, table, deltas, versions, state_at, closed_at):
    """Every form at every delta and pair: as of each delta and every stored version through the
    library; every pair through the docs' SQL (one query per form, the pairs' clauses side by side),
    and the library's answer on the single deltas and the whole story."""
    for n in deltas:
        truth = [row for _, row in sorted(state_at(n).items())]
        assert rows_as_of(session, layout, dm, table, n) == truth, f"{table} AS OF DELTA_NUM {n}"
    whole = versions_in(session, layout, dm, table, StartedIn(deltas[0], deltas[-1]))
    columns = [c for c in (whole[0] if whole else {}) if c not in SYS]
    assert whole == expected(versions, StartedIn(deltas[0], deltas[-1]), columns, state_at, deltas[-1]), f"{table} versions"
    pairs = list(combinations_with_replacement(deltas, 2))
    for a, b in [(d, d) for d in deltas] + [(deltas[0], deltas[-1])]:
        for form in (StartedIn(a, b), FinishedIn(a, b)):
            got = versions_in(session, layout, dm, table, form)
            columns = [c for c in (got[0] if got else {}) if c not in SYS]
            assert got == expected(versions, form, columns, state_at, deltas[-1]), f"{table} {form}"
    # The docs' SQL on the two tables (no deltaport code involved), every pair.
    current = (f"SELECT sys_from, sys_from_date, NULL AS sys_close_date, NULL AS sys_to, 0 AS sys_op "
               f"FROM {layout.snapshot(dm, table)}")
    closed = (f"SELECT sys_from, sys_from_date, sys_close_date, sys_to, sys_op "
              f"FROM {history_ident(layout, dm, table)}")
    # AS OF a time, on the close times alone: the versions current at the delta closed then.
    parts = [f"SELECT {n} AS n, sys_from FROM ({current} UNION ALL {closed}) WHERE (sys_from_date IS NULL OR "
             f"sys_from_date <= TIMESTAMP_NTZ '{closed_at(n)}') AND (sys_close_date IS NULL OR "
             f"sys_close_date > TIMESTAMP_NTZ '{closed_at(n)}')" for n in deltas]
    by_time = sorted((r.n, r.sys_from) for r in session.sql(" UNION ALL ".join(parts)).collect())
    assert by_time == sorted((n, v["sys_from"]) for n in deltas for v in versions
                             if v["sys_from"] <= n and (v["sys_to"] is None or v["sys_to"] >= n)), "AS OF a time"
    for kind in (StartedIn, FinishedIn):
        parts = [f"SELECT {a} AS a, {b} AS b, * FROM ({current} UNION ALL {closed}) WHERE {kind(a, b).where()}"
                 if kind(a, b).needs_current() else
                 f"SELECT {a} AS a, {b} AS b, sys_from, sys_to, sys_op FROM {history_ident(layout, dm, table)} "
                 f"WHERE {history_where(kind(a, b))}" for a, b in pairs]
        plain = sorted((r.a, r.b, r.sys_from, -1 if r.sys_to is None else r.sys_to, r.sys_op)
                       for r in session.sql(" UNION ALL ".join(parts)).collect())
        want = sorted((a, b, r["sys_from"], -1 if r["sys_to"] is None else r["sys_to"], r["sys_op"])
                      for a, b in pairs for r in expected(versions, kind(a, b), [], state_at, deltas[-1]))
        assert plain == want, f"{table} {kind.__name__}: the docs' SQL"
        # PyIceberg, no JVM: the same clauses on the same two tables.
        snapshot, closed = (load_table(ident, type="hadoop", catalog=layout.catalog, warehouse=str(warehouse))
                            for ident in (layout.snapshot(dm, table), history_ident(layout, dm, table)))
        found = sorted((a, b, r["sys_from"], -1 if r["sys_to"] is None else r["sys_to"], r["sys_op"])
                       for a, b in pairs for r in read_history(snapshot, closed, kind(a, b), deltas[-1]).to_pylist())
        assert found == want, f"{table} {kind.__name__}: PyIceberg"


def test_every_form_on_the_emulators_story(lake, kafka_bootstrap, tmp_path):
    session, layout, warehouse = lake
    sc = build_scenario(CONFIG)
    deltas = sorted(sc.truth[DM])
    assert deltas == list(range(len(deltas))) and sc.cancelled[DM], "a cancelled delta whose number is reused"
    topic, index = published_backup(sc, kafka_bootstrap, tmp_path, "history")
    started = time.monotonic()
    for n in deltas:  # one by one, then range runs (apply after the range's last increment)
        land_delta(session, layout, kafka_bootstrap, topic, index, DM, n, apply=n in (0, 1, 4, deltas[-1]))
    print(f"landed {len(deltas)} deltas in {time.monotonic() - started:.1f} s")

    for table in sorted({t for state in sc.truth[DM].values() for t in state}):
        pk = sc.databases[DM].tables[table].primary_key

        versions = oracle_versions(
            deltas, lambda d, table=table: [(c.row, c.sys_op) for c in sc.increments[DM][d] if c.table == table],
            lambda row, pk=pk: tuple(row[k] for k in pk))
        assert any(v["sys_op"] == 1 for v in versions) and any(v["sys_to"] is not None and v["sys_op"] == 0
                                                               for v in versions), table
        started = time.monotonic()
        check_every_form(session, layout, warehouse, DM, table, deltas, versions,
                         lambda d, table=table: sc.truth[DM][d].get(table, {}), lambda d: sc.delta_dates[DM][d])
        print(f"{table}: every form checked in {time.monotonic() - started:.1f} s")


def test_deletes_and_reinserts_in_a_fold(lake, monkeypatch, tmp_path, capsys):
    session, layout, warehouse = lake
    dm = "reinsert"
    ddl = [ChangelogRecord(0, "t", "CREATE TABLE reinsert.t (id BIGINT NOT NULL, v VARCHAR, "
                                   "PRIMARY KEY (id)) DISTRIBUTED BY (id)")]
    story = [  # each delta's changes: (id, v, sys_op)
        [(1, "a", 0), (2, "b", 0), (3, "c", 0)],
        [(1, "a", 1), (2, "b2", 0)],
        [(1, "a3", 0), (2, "b2", 1)],       # re-insert 1; delete 2
        [(2, "b4", 0), (3, "c4", 0)],       # re-insert 2 the delta after its delete
        [(1, "a5", 0), (3, "c4", 1)],
        [],                                  # a delta that changes nothing
        [(3, "c7", 0), (1, "a5", 1)],
    ]
    states = []
    for n, changes in enumerate(story):
        states.append(land_story_delta(session, layout, dm, ddl, n, changes, states[-1] if states else {}))
        if n == 1:  # 0-1 one by one, then 2-6 as one range run
            apply_snapshots(session, layout, dm, n)
    # The range run dies between its history commit and its MERGE: readers see delta 1 exactly.
    with monkeypatch.context() as m:
        m.setattr(prostore_snapshot, "merge_upserts", _crash)
        with pytest.raises(RuntimeError, match="killed"):
            apply_snapshots(session, layout, dm, len(story) - 1)
    assert session.table(history_ident(layout, dm, "t")).where("delta_num >= 2").count() > 0
    assert rows_as_of(session, layout, dm, "t", 1) == sorted(states[1].values(), key=lambda r: r["id"])
    assert [r["sys_from"] for r in versions_in(session, layout, dm, "t", StartedIn(0, 1))] == [0, 0, 1, 0]
    apply_snapshots(session, layout, dm, len(story) - 1)  # the re-run: the same history, then the MERGE
    deltas = list(range(len(story)))
    versions = oracle_versions(deltas, lambda d: [({"id": i, "v": v}, op) for i, v, op in story[d]],
                               lambda row: (row["id"],))
    check_every_form(session, layout, warehouse, dm, "t", deltas, versions, lambda n: states[n], close_at)
    # The re-run replaced the history partitions it had written: no version twice.
    assert session.table(history_ident(layout, dm, "t")).count() == sum(v["sys_to"] is not None for v in versions)

    # `deltaport read`, as a user runs it: each form's flag prints what the library returns.
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": dm, "format": "prostore", "signal_topic": "s", "backup_topic": "b"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `read` reads the lake only
        "lake": {"catalog": layout.catalog, "type": "hadoop", "warehouse": str(warehouse)},
        "state_dir": str(tmp_path / "state")}))

    def read(*flags):
        code = main(["read", f"{dm}.t", "--config", str(config), *flags])
        out = capsys.readouterr()
        assert code == 0, out.err[-2000:]
        return [json.loads(line) for line in out.out.splitlines()], out.err

    for flag, form in (("--started-in", StartedIn(2, 4)), ("--finished-in", FinishedIn(1, 6))):
        printed, _ = read(flag, f"{form.first},{form.last}")
        assert printed == versions_in(session, layout, dm, "t", form) != [], flag
    printed, err = read("--as-of", "2026-01-03 12:00:00")  # delta 2 closed on 2026-01-03 at 00:00
    assert printed == sorted(states[2].values(), key=lambda r: r["id"]) and "as of delta 2" in err

    # `--engine pyiceberg` (no JVM) answers every form as the Spark engine does: every delta (those
    # inside the folds 0-1 and 2-6 have no tag of their own), delta 1 once its tag is dropped too.
    assert session.sql(f"SELECT name FROM {layout.snapshot(dm, 't')}.refs WHERE type = 'TAG'").count() > 1
    for n in deltas[:-1]:
        session.sql(f"ALTER TABLE {layout.snapshot(dm, 't')} DROP TAG IF EXISTS delta_{n}")
    printed = []
    ranges = [[flag, pair] for flag in ("--started-in", "--finished-in") for pair in ("0,6", "2,4", "1,1", "6,6")]
    for flags in ([["--as-of-delta", str(n)] for n in deltas] + [["--as-of", f"2026-01-0{d} 12:00:00"] for d in (1, 5)]
                  + ranges + [[]]):
        printed.append(read_with_both_engines(config, f"{dm}.t", flags, capsys))
    assert sum(map(bool, printed)) > len(printed) - 4, "most forms answer rows"


def land_story_delta(session, layout, dm, ddl, n, changes, before):
    """Land delta n of a one-table story `t` (its `changes`: [(id, v, sys_op)]) as changelog and
    increment; returns the table's state after it ({(id,): row}) from the state `before`."""
    entities = land_changelog(session, layout, dm, n, f"inc-{n}", ddl)
    rows = [(i, v, op, 0, k) for k, (i, v, op) in enumerate(changes)]
    frames = {"t": session.createDataFrame(rows, output_spark_schema(entities["t"].columns))} if rows else {}
    land_increment(session, layout, dm, n, int((close_at(n) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000,
                   f"inc-{n}", entities, frames)
    state = dict(before)
    for i, v, op in changes:
        if op:
            state.pop((i,), None)
        else:
            state[(i,)] = {"id": i, "v": v}
    return state


def close_at(n: int) -> dt.datetime:
    return dt.datetime(2026, 1, 1 + n)


def _crash(*args, **kwargs):
    raise RuntimeError("killed before the MERGE")

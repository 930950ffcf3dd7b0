"""Prostore's FOR SYSTEM_TIME forms on a change stream's history (issue 28, item 1), against an
oracle built from the true state after every delta.

Two stories, landed with the lake layer (increments, snapshots; no Dagster), single deltas and
range folds mixed:
- hand-made changes of one table (test_cdc_lake's focused deltas and more): duplicates, late
  changes within and across deltas, partial captures carried through a fold, a key deleted and
  re-inserted (in one delta, in consecutive deltas, inside a fold), a key inserted and deleted in
  one delta (a tombstone, never a version), a delta that changes nothing; the fold 6-8 dies
  between its history commit and its MERGE first, then runs again;
- the Qlik emulator's story (before-images, re-delivered duplicates, partial UPDATEs), its truth
  from the story (resources/emulator/stream_oracle.py's rule: the state after the newest change
  delivered so far).
The oracle follows the versions from the per-delta states: a key's version starts at a delta
where its live row appeared or changed, and ends at the delta before its next change, with
sys_op 1 when that change leaves the key deleted. Then, for every delta and pair (a, b):
- AS OF DELTA_NUM n (`cdc_rows_as_of`, from the history) equals the truth at n, also once every
  tag but the last is dropped (no tag needed);
- STARTED IN / FINISHED IN (`cdc_versions_in`) equal the oracle's versions, and so do the docs'
  WHERE clauses in plain Spark SQL and with PyIceberg (no JVM), for every pair;
- `deltaport read --started-in/--finished-in/--as-of-delta` prints what the library returns, and
  `--engine pyiceberg` prints what the Spark engine prints for every form (no tag but the last).
"""

from __future__ import annotations

import json
import sys
import time
from itertools import combinations_with_replacement

import pytest
import yaml

from platform_assets.cli import main
from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change
from resources.lake import cdc
from resources.lake.cdc import CdcDelta, apply_cdc_through, cdc_rows_as_of, changes_frame, infer_columns, \
    land_cdc_increments, order_key_text
from resources.lake.cdc_read import cdc_recorded_deltas, cdc_versions_in
from resources.lake.history_forms import FinishedIn, StartedIn, history_where
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident, history_start
from resources.lake.pyiceberg_read import load_table, read_history
from resources.lake.stream_history import LIVE
from resources.spark.session import CatalogConfig, connect
from resources.spark.iceberg_reads import recorded_property_sql
from tests.support.read_engines import read_with_both_engines
from tests.integration.test_cdc_lake import (KEY, T, change, changes_by_table, decoded, focused_deltas, full,
                                             spark_columns, transaction_cuts)

pytestmark = pytest.mark.integration

SYS = ("sys_from", "sys_to", "sys_op")


@pytest.fixture(scope="module")
def lake(spark_remote, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("stream-history-lake")
    return connect(spark_remote, CatalogConfig(name="shist", warehouse=str(warehouse))), LakeLayout("shist"), warehouse


def applied_keys(deltas, key_of):
    """[{keys a change of delta d applies to}]: a change counts unless it is a before-image or late
    (its order not above every order of the key's changes in earlier deltas: the order rules of
    resources/lake/cdc_fold.py). `deltas`: each delta's changes of one table."""
    newest, out = {}, []
    for changes in deltas:
        mine = [ch for ch in changes if ch.operation != BEFORE_IMAGE]
        out.append({key_of(ch) for ch in mine if order_key_text(ch.order_key) > newest.get(key_of(ch), "")})
        for ch in mine:
            newest[key_of(ch)] = max(newest.get(key_of(ch), ""), order_key_text(ch.order_key))
    return out


def oracle_versions(states, applied):
    """Every version of one table from its true states ([{key: row}] per delta) and the keys each
    delta applies a change to (`applied_keys`): a delta that writes a live key closes its version,
    even with the same values (a delete and re-insert of the same row, as a Prostore increment's
    upsert does). Dicts with key, row, sys_from, sys_to, sys_op."""
    versions, open_, before = [], {}, {}
    for d, state in enumerate(states):
        for key in set(before) | set(state):
            if same_row(before.get(key), state.get(key)) and (key not in applied[d] or key not in state):
                continue
            if key in open_:
                versions.append({**open_.pop(key), "sys_to": d - 1, "sys_op": int(key not in state)})
            if key in state:
                open_[key] = {"key": key, "row": state[key], "sys_from": d}
        before = state
    return versions + [{**v, "sys_to": None, "sys_op": 0} for v in open_.values()]


def same_row(a, b) -> bool:
    """Equal rows, a column one lacks (added later: ALTER TABLE ADD) and the other holds NULL alike."""
    return (a is None) == (b is None) and (a is None or {k: v for k, v in a.items() if v is not None}
                                             == {k: v for k, v in b.items() if v is not None})


def selected(versions, form):
    if isinstance(form, StartedIn):
        return [v for v in versions if form.first <= v["sys_from"] <= form.last]
    return [v for v in versions if v["sys_op"] == 1 and form.first - 1 <= v["sys_to"] <= form.last - 1]


def canonical(rows, columns):
    out = [{c: r.get(c) for c in columns} for r in rows]
    return sorted(out, key=lambda r: [(v is not None, repr(v)) for v in r.values()])


def same(got, want, label):
    columns = sorted({c for r in got for c in r} | {c for r in want for c in r})
    g, w = canonical(got, columns), canonical(want, columns)
    assert g == w, f"{label}: only got {[r for r in g if r not in w]}, only want {[r for r in w if r not in g]}"


def check_every_form(session, layout, warehouse, src, table, states, applied, key_of):
    """Every form at every delta and pair: `states`, the true {key: row} after each delta;
    `applied`, `applied_keys`; `key_of(row)`: the key's text as `concat_ws('|', <key columns>)`
    gives it in SQL."""
    deltas = list(range(len(states)))
    ident = layout.snapshot(src, table)
    assert history_start(session, ident) == 0, "a stream table keeps its history from its first delta"
    versions = oracle_versions(states, applied)
    assert any(v["sys_op"] == 1 for v in versions) and any(v["sys_op"] == 0 and v["sys_to"] is not None
                                                           for v in versions), "deletes and updates both close"
    started = time.monotonic()
    for n in deltas:
        same(cdc_rows_as_of(session, layout, src, table, n), list(states[n].values()), f"{table} AS OF DELTA_NUM {n}")
    log(f"{table}: AS OF every delta in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    last = deltas[-1]
    for a, b in [(d, d) for d in deltas] + [(0, last)]:
        for form in (StartedIn(a, b), FinishedIn(a, b)):
            _, got = cdc_versions_in(session, layout, src, table, form, last=last)
            want = [{**v["row"], **{s: v[s] for s in SYS}} for v in selected(versions, form)]
            same(got, want, f"{table} {form}")
    log(f"{table}: the library's ranges in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    pairs = list(combinations_with_replacement(deltas, 2))
    keys = ", ".join(f"`{k}`" for k in json.loads(session.sql(f"SELECT {recorded_property_sql('deltaport.keys', ident)} FROM {ident}.snapshots "
                                                              "ORDER BY committed_at DESC LIMIT 1").first()[0]))
    current = (f"SELECT concat_ws('|', {keys}) AS k, sys_from, NULL AS sys_to, 0 AS sys_op, NULL AS delta_num "
               f"FROM {ident} WHERE {LIVE}")
    closed = (f"SELECT concat_ws('|', {keys}) AS k, sys_from, sys_to, sys_op, delta_num "
              f"FROM {history_ident(layout, src, table)}")
    snapshot_t, closed_t = (load_table(i, type="hadoop", catalog=layout.catalog, warehouse=str(warehouse))
                            for i in (ident, history_ident(layout, src, table)))
    for kind in (StartedIn, FinishedIn):
        # The docs' SQL on the two tables (no deltaport code involved): one query, the pairs side by side.
        parts = [f"SELECT {a} AS a, {b} AS b, * FROM ({current} UNION ALL {closed}) WHERE {kind(a, b).where()}"
                 if kind(a, b).needs_current() else
                 f"SELECT {a} AS a, {b} AS b, * FROM ({closed}) WHERE {history_where(kind(a, b))}" for a, b in pairs]
        plain = sorted((r.a, r.b, r.k, r.sys_from, -1 if r.sys_to is None else r.sys_to, r.sys_op)
                       for r in session.sql(" UNION ALL ".join(parts)).collect())
        want = sorted((a, b, key_of(v["row"]), v["sys_from"], -1 if v["sys_to"] is None else v["sys_to"], v["sys_op"])
                      for a, b in pairs for v in selected(versions, kind(a, b)))
        assert plain == want, f"{table} {kind.__name__}: the docs' SQL"
        # PyIceberg, no JVM: the same clauses on the same two tables.
        found = sorted((a, b, r["sys_from"], -1 if r["sys_to"] is None else r["sys_to"], r["sys_op"]) for a, b in pairs
                       for r in read_history(snapshot_t, closed_t, kind(a, b), last, current_filter=LIVE).to_pylist())
        assert found == sorted(w[:2] + w[3:] for w in want), f"{table} {kind.__name__}: PyIceberg"
    log(f"{table}: every pair by SQL and PyIceberg in {time.monotonic() - started:.1f} s")
    return versions


def hand_story():
    """The focused deltas 0-2 and deltas 3-8 on top ({id: (a, b, c)} after each)."""
    story = [(changes, {k: v for k, v in state.items()}) for changes, state in focused_deltas()]
    s2 = story[2][1]
    more = [
        ([change(DELETE, 1, (60,)), change(UPSERT, 7, (61,), captured={"a"}, a="seven")],
         {**{k: v for k, v in s2.items() if k != 1}, 7: ("seven", None, None)}),
        ([full(1, (62,), "one", 10, 10.0), change(UPSERT, 8, (8,), captured={"b"}, b=88)],  # 8's change is late
         {**s2, 1: ("one", 10, 10.0), 7: ("seven", None, None)}),
    ]
    story += more
    s4 = story[4][1]
    s5 = {**{k: v for k, v in s4.items() if k != 3}, 2: ("two", 20, 20.0), 4: ("four", None, None)}
    s7 = {**{k: v for k, v in s5.items() if k != 2}, 3: ("three", 30, 30.0), 4: ("four", 44, None)}
    s8 = {**{k: v for k, v in s7.items() if k != 3}, 9: ("nine again", 9, 9.0), 4: ("four", 44, 4.5),
          2: ("two back", 2, 2.0)}
    story += [
        ([full(2, (70,), "two", 20, 20.0), change(DELETE, 3, (71,)), change(UPSERT, 4, (72,), captured={"a"}, a="four")],
         s5),
        ([], s5),  # a delta with no change of the table
        ([full(3, (80,), "three", 30, 30.0), change(DELETE, 2, (81,)),  # 3 back, 2 gone
          full(9, (82,), "nine", 9, 9.0), change(DELETE, 9, (83,)),  # born and deleted in one delta: no version
          change(UPSERT, 4, (84,), captured={"b"}, b=44)], s7),
        ([full(9, (90,), "nine again", 9, 9.0), change(UPSERT, 4, (91,), captured={"c"}, c=4.5),
          change(DELETE, 3, (92,)), full(2, (93,), "two back", 2, 2.0)], s8),
    ]
    return story


def test_every_form_on_hand_made_changes(lake, monkeypatch, tmp_path, capsys):
    session, layout, warehouse = lake
    src = "hand"
    story = hand_story()
    columns = spark_columns()
    states = [{k: {"id": k, "a": a, "b": b, "c": c} for k, (a, b, c) in state.items()} for _, state in story]
    started = time.monotonic()
    land_cdc_increments(session, layout, src, [
        CdcDelta(n, {T: changes_frame(session, changes, columns)} if changes else {},
                 delta_date_us=1_767_225_600_000_000 + n * 86_400_000_000) for n, (changes, _) in enumerate(story)])
    for n in (0, 1, 4, 5):  # 0, 1 and 5 one by one; 2-4 fold into one MERGE
        apply_cdc_through(session, layout, src, n, {T: KEY})
    # The fold 6-8 dies between its history commit and its MERGE: readers still see delta 5 exactly.
    with monkeypatch.context() as m:
        m.setattr(cdc, "merge_folded", _crash)
        with pytest.raises(RuntimeError, match="killed"):
            apply_cdc_through(session, layout, src, 8, {T: KEY})
    assert session.table(history_ident(layout, src, T)).where("delta_num >= 6").count() > 0
    same(cdc_rows_as_of(session, layout, src, T, 5), list(states[5].values()), "as of 5 after the crash")
    _, begun = cdc_versions_in(session, layout, src, T, StartedIn(0, 5), last=5)
    assert sorted((r["id"], r["sys_from"], r["sys_to"]) for r in begun if r["id"] == 3) == [(3, 0, 4)]
    apply_cdc_through(session, layout, src, 8, {T: KEY})  # the re-run: the same history, then the MERGE
    log(f"landed and applied in {time.monotonic() - started:.1f} s")
    applied = applied_keys([changes for changes, _ in story], lambda ch: ch.values["id"])
    versions = check_every_form(session, layout, warehouse, src, T, states, applied, lambda row: str(row["id"]))
    # Versions inside the fold 6-8 are exact: key 4's partial changes carried column by column.
    assert [(v["sys_from"], v["sys_to"], v["row"]["b"], v["row"]["c"]) for v in versions
            if v["key"] == 4 and v["sys_from"] >= 5] == [(5, 6, None, None), (7, 7, 44, None), (8, None, 44, 4.5)]
    # The re-run replaced the partitions it had written: no version twice.
    assert session.table(history_ident(layout, src, T)).count() == sum(v["sys_to"] is not None for v in versions)
    # No tag needed: with every tag but the last dropped, every delta still reads back exactly.
    ident = layout.snapshot(src, T)
    for n in range(len(story) - 1):
        session.sql(f"ALTER TABLE {ident} DROP TAG IF EXISTS delta_{n}")
    for n, state in enumerate(states):
        same(cdc_rows_as_of(session, layout, src, T, n), list(state.values()), f"AS OF {n} without tags")
    assert cdc_recorded_deltas(session, ident) == set(range(len(story))), "every delta still recorded (export)"

    # `deltaport read`, as a user runs it.
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": src, "format": "qlik", "topic": "t"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `read` reads the lake only
        "lake": {"catalog": layout.catalog, "type": "hadoop", "warehouse": str(warehouse)},
        "state_dir": str(tmp_path / "state")}))

    capsys.readouterr()

    def read(*flags):
        code = main(["read", f"{src}.{T}", "--config", str(config), *flags])
        out = capsys.readouterr()
        assert code == 0, out.err[-2000:]
        return [json.loads(line) for line in out.out.splitlines()]

    for flag, form in (("--started-in", StartedIn(2, 7)), ("--finished-in", FinishedIn(1, 8))):
        printed = read(flag, f"{form.first},{form.last}")
        _, want = cdc_versions_in(session, layout, src, T, form, last=8)
        assert printed == want != [], flag
        assert list(printed[0]) == ["id", "a", "b", "c", *SYS], flag
    assert sorted(r["id"] for r in read("--as-of-delta", "6")) == sorted(states[6])
    # `--engine pyiceberg` (no JVM) answers every form as the Spark engine does, every tag but the
    # last dropped: each delta (the fold 2-4's too) from the history, a time, the ranges.
    printed = []
    ranges = [[flag, pair] for flag in ("--started-in", "--finished-in") for pair in ("0,8", "2,4", "3,3", "7,8")]
    for flags in ([["--as-of-delta", str(n)] for n in range(len(story))] + [["--as-of", "2026-01-04 12:00:00"]]
                  + ranges + [[]]):
        printed.append(read_with_both_engines(config, f"{src}.{T}", flags, capsys))
    assert sum(map(bool, printed)) > len(printed) - 4, "most forms answer rows"


def test_every_form_on_the_qlik_emulators_story(lake, tmp_path):
    from resources.codecs.qlik import QlikDecoder
    from resources.emulator.qlik import QlikConfig, build_qlik_story

    session, layout, warehouse = lake
    src = "qlikstory"
    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    decoder = QlikDecoder()
    pairs = decoded(story.messages, decoder.decode)
    records = [rec for _, rec in pairs]
    parts = 4
    bounds = [0, *transaction_cuts(pairs, lambda r: isinstance(r, Change) and r.last_in_transaction, parts), len(records)]
    keys = {t: decoder.table(story.config.schema, t).key_columns for t in story.tables}
    types = {t: infer_columns(chs, []) for t, chs in changes_by_table(records).items()}
    chunks = [changes_by_table(records[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]
    land_cdc_increments(session, layout, src, [
        CdcDelta(n, {t: changes_frame(session, chs, types[t]) for t, chs in chunk.items()})
        for n, chunk in enumerate(chunks)])
    truths = [story.state_after(max(r.order_key for r in records[:hi] if isinstance(r, Change))) for hi in bounds[1:]]
    for n in (0, 1, parts - 1):  # 0 and 1 one by one, the rest as one fold
        apply_cdc_through(session, layout, src, n, keys)
    for table in story.tables:
        key = keys[table]
        states = [{tuple(r[k] for k in key): r for r in truth[table].values()} for truth in truths]
        applied = applied_keys([chunk.get(table, []) for chunk in chunks],
                               lambda ch, key=key: tuple(ch.values[k] for k in key))
        check_every_form(session, layout, warehouse, src, table, states, applied,
                         lambda row, key=key: "|".join(str(row[k]) for k in key))


def log(line: str) -> None:
    print(line, file=sys.__stderr__, flush=True)  # past capsys: the timings of a run


def _crash(*args, **kwargs):
    raise RuntimeError("killed before the MERGE")

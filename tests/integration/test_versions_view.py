"""The versions views (issue 41 item 3) on Iceberg's JDBC catalog (PostgreSQL), and `deltaport sql`
on that catalog.

One lake, landed with the lake layer (no Dagster): test_history_forms' table whose keys are
deleted and inserted again, with a column `w` added by delta 3's DDL, and beside it a table `u`
that deltas 0 and 1 change and every later delta leaves alone; deltas 0-2 one by one, 3-6
in one range run (split at the column change, 4-6 folded); and test_stream_history's change
stream `hand.things` (late and duplicate changes, tombstones, a key deleted and re-inserted), landed
as the SQL corpus lands it. Checked:
- the view `lake.reinsert_versions.t` exists once the table does, gains `w` in the step that adds
  it, is replaced then only (its metadata's version number: 1), and its rows are `H`;
- each FOR SYSTEM_TIME form's WHERE, the text `deltaport sql`'s rewrite puts around `H`
  (resources/lake/history_forms.py), run by Spark on the view, equals the oracle
  (test_history_forms' `oracle_versions` / `expected` and the truth at each delta), and equals
  `deltaport sql` of the same Prostore query on this JDBC lake with both engines;
- the SQL corpus' queries on this table (tests/integration/test_sql_corpus.py `reinsert_queries`:
  every form, a join of two forms, AS OF a time), by `deltaport sql` on both engines on this JDBC
  lake, equal the corpus' oracle (the truth of what each reference selects, the rest run by DuckDB);
- the stream's view `lake.hand_versions.things`: its data columns, no tombstone, and each form's
  WHERE equal to its oracle (test_stream_history's versions);
- the untouched table (issue 57): no commit and no tag after delta 1, only the source's mark
  moved (to 2, then 6), and docs/using.md's recipe ("As of a delta from another engine": L from
  the manifest, history-from and R from the table's own metadata, each by the SQL given there)
  then the view with AS OF DELTA_NUM's WHERE equal the truth at every delta 0-6, and STARTED IN
  and FINISHED IN the oracle.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlparse

import pyarrow as pa
import pytest
import yaml

from platform_assets.config import load_config
from platform_assets.sql_query import answer_sql
from resources.codecs.backup import ChangelogRecord
from resources.lake.history_forms import AsOfDelta, FinishedIn, StartedIn
from resources.lake.prostore_dialect import AS_OF_DELTA, AS_OF_TIME, STARTED_IN
from resources.lake.layout import LakeLayout
from resources.lake.prostore import land_changelog, land_increment
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.versions_view import view_ident
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect
from tests.integration.test_history_forms import close_at, expected, oracle_versions
from tests.integration.test_cdc_lake import T
from tests.integration.test_sql_corpus import land_hand_story, normal, oracle, reinsert_queries
from tests.integration.test_stream_history import selected
from tests.integration.test_stream_history import oracle_versions as stream_versions
from tests.support.postgres import PASSWORD_ENV

pytestmark = pytest.mark.integration

RE, CS, CATALOG = "reinsert", "hand", "vjdbc"
SYSTEM = ["sys_from", "sys_from_date", "sys_to", "sys_op", "sys_close_date", "delta_num"]
CREATE = ChangelogRecord(0, "t", "CREATE TABLE reinsert.t (id BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (id)) "
                                 "DISTRIBUTED BY (id)")
CREATE_U = ChangelogRecord(1, "u", "CREATE TABLE reinsert.u (id BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (id)) "
                                   "DISTRIBUTED BY (id)")
ADD_W = ChangelogRecord(2, "t", "ALTER TABLE reinsert.t ADD COLUMN w VARCHAR")
W_FROM = 3  # the delta whose DDL adds `w`
STORY = [  # each delta's changes (id, v, w, sys_op)
    [(1, "a", None, 0), (2, "b", None, 0), (3, "c", None, 0)],
    [(1, "a", None, 1), (2, "b2", None, 0)],
    [(1, "a3", None, 0), (2, "b2", None, 1)],
    [(2, "b4", "x4", 0), (3, "c4", None, 0)],
    [(1, "a5", "y5", 0), (3, "c4", None, 1)],
    [],
    [(3, "c7", "z7", 0), (1, "a5", "y5", 1)],
]
LAST = len(STORY) - 1
# Table u: changed by deltas 0 and 1 (an update, a delete, an insert), left alone by 2-6.
U_STORY = {0: [(1, "p", 0), (2, "q", 0), (3, "r", 0)], 1: [(1, "p1", 0), (2, "q", 1), (4, "s", 0)]}
U_LAST = max(U_STORY)


def u_states() -> list[dict]:
    """u's rows after each delta 0..LAST, {(id,): row}."""
    states, state = [], {}
    for n in range(LAST + 1):
        for i, v, op in U_STORY.get(n, []):
            if op:
                state.pop((i,), None)
            else:
                state[(i,)] = {"id": i, "v": v}
        states.append(dict(state))
    return states


def columns_at(n: int) -> list[str]:
    return ["id", "v", "w"] if n >= W_FROM else ["id", "v"]


def land(session, layout, n: int, before: dict) -> dict:
    """Land delta n (changelog and increment); the table's state after it, {(id,): row}."""
    entities = land_changelog(session, layout, RE, n, f"inc-{n}",
                              [CREATE, CREATE_U, ADD_W] if n >= W_FROM else [CREATE, CREATE_U])
    width = len(columns_at(n))
    rows = [(i, v, w, op, 0, k)[:width] + (op, 0, k) for k, (i, v, w, op) in enumerate(STORY[n])]
    frames = {"t": session.createDataFrame(rows, output_spark_schema(entities["t"].columns))} if rows else {}
    if n in U_STORY:  # as the Kafka reader gives rows the driver read: Arrow, counted on the client
        frames["u"] = pa.Table.from_pylist(
            [{"id": i, "v": v, "sys_op": op, "_kafka_partition": 0, "_kafka_offset": k}
             for k, (i, v, op) in enumerate(U_STORY[n])],
            pa.schema([("id", pa.int64()), ("v", pa.string()), ("sys_op", pa.int32()),
                       ("_kafka_partition", pa.int32()), ("_kafka_offset", pa.int64())]))
    land_increment(session, layout, RE, n, int((close_at(n) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000,
                   f"inc-{n}", entities, frames)
    state = dict(before)
    for i, v, w, op in STORY[n]:
        if op:
            state.pop((i,), None)
        else:
            state[(i,)] = {"id": i, "v": v, "w": w}
    return state


@pytest.fixture(scope="module")
def lake(spark_remote, postgres, tmp_path_factory):
    folder = tmp_path_factory.mktemp("versions-view")
    db = postgres.database("vview")
    user = urlparse(postgres.url).username
    catalog = CatalogConfig(name=CATALOG, type="jdbc", uri=postgres.jdbc_url(db), warehouse=str(folder / "warehouse"),
                            properties={"jdbc.user": user}, secret_properties={"jdbc.password": PASSWORD_ENV})
    session = connect(spark_remote, catalog)
    layout = LakeLayout(CATALOG, versions_views=True)
    view = view_ident(CATALOG, RE, "t")
    states, columns_seen = [], {}
    for n in range(len(STORY)):
        states.append(land(session, layout, n, states[-1] if states else {}))
        if n < W_FROM or n == LAST:
            apply_snapshots(session, layout, RE, n)
            columns_seen[n] = session.table(view).columns
    stream = land_hand_story(session, layout, CS)  # a change stream, landed as the SQL corpus lands it
    config = folder / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": RE, "format": "prostore", "signal_topic": "s", "backup_topic": "b"},
                    {"name": CS, "format": "qlik", "topic": "t"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `sql` reads the lake only
        "lake": {"catalog": CATALOG, "type": "jdbc", "uri": catalog.uri, "warehouse": catalog.warehouse,
                 "properties": {"jdbc.user": user, "jdbc.password": {"env": PASSWORD_ENV}}},
        "state_dir": str(folder / "state")}))
    return session, view, states, columns_seen, load_config(str(config)), view_version(postgres, db), stream


def view_version(postgres, db: str) -> int:
    """The number of the view's current metadata file (00000 at creation, one more per replace),
    read from the JDBC catalog's own table."""
    import psycopg2

    conn = psycopg2.connect(db, password=postgres.password)
    try:
        cur = conn.cursor()
        cur.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = %s AND table_name = %s "
                    "AND iceberg_type = 'VIEW'", (f"{RE}_versions", "t"))
        (location,) = cur.fetchone()
    finally:
        conn.close()
    return int(location.rsplit("/", 1)[-1].split("-", 1)[0])


def test_the_view_follows_the_ddl(lake):
    session, view, states, columns_seen, _, version, _ = lake
    assert columns_seen[0] == columns_seen[W_FROM - 1] == ["id", "v", *SYSTEM]
    assert columns_seen[LAST] == ["id", "v", "w", *SYSTEM], "the ADD COLUMN reached the view"
    # H: every version once, the current ones with sys_to null
    versions = Truth(states).versions
    got = sorted((r.id, r.sys_from, r.sys_to, r.sys_op) for r in session.table(view).collect())
    assert got == sorted((v["key"][0], v["sys_from"], v["sys_to"], v["sys_op"]) for v in versions)
    assert version == 1, "written when the table was made and replaced when `w` came, never per delta"


def forms():
    yield from (AsOfDelta(n) for n in range(len(STORY)))
    yield from (form(a, b) for form in (StartedIn, FinishedIn) for a, b in ((0, 6), (1, 2), (2, 3), (3, 6), (5, 5)))


def prostore_form(form) -> str:
    if isinstance(form, AsOfDelta):
        return f"AS OF DELTA_NUM {form.delta}"
    return f"{'STARTED' if isinstance(form, StartedIn) else 'FINISHED'} IN ({form.first}, {form.last})"


def test_every_form_on_the_view_equals_the_oracle_and_deltaport_sql(lake):
    session, view, states, _, cfg, _, _ = lake
    versions = Truth(states).versions
    checked = 0
    for form in forms():
        delta = form.delta if isinstance(form, AsOfDelta) else form.last
        columns = columns_at(delta)
        if isinstance(form, AsOfDelta):
            want = sorted(tuple(r[c] for c in columns) for r in states[form.delta].values())
        else:
            want = sorted(tuple(r[c] for c in columns) for r in expected(versions, form, columns,
                                                                          lambda d: states[d], LAST))
        # what a Spark user writes on the view: the documented WHERE, bounded by the last landed delta
        on_view = (f"SELECT {', '.join(columns)} FROM {view} WHERE ({form.where()}) "
                   f"AND (delta_num IS NULL OR delta_num <= {LAST})")
        got = sorted(tuple(r) for r in session.sql(on_view).collect())
        assert got == want, f"{form} on the view"
        query = f"SELECT {', '.join(columns)} FROM {RE}.t FOR SYSTEM_TIME {prostore_form(form)}"
        for engine in ("duckdb", "spark"):
            rows = answer_sql(query, cfg, engine=engine).rows
            assert sorted(tuple(r.values()) for r in rows.to_pylist()) == want, f"{engine}: {query}"
        checked += len(want)
    assert checked > 30


class Truth:
    """What test_sql_corpus's `oracle` asks of a story: the rows each reference selects."""

    def __init__(self, states: list[dict]):
        self.states = states
        self.versions = oracle_versions(list(range(len(STORY))),
                                        lambda d: [({"id": i}, op) for i, _, _, op in STORY[d]], lambda row: (row["id"],))

    def rows(self, source: str, table: str, kind: str | None, value) -> tuple[list[str], list[dict]]:
        assert (source, table) == (RE, "t")
        if kind in (None, AS_OF_DELTA, AS_OF_TIME):
            delta = LAST if kind is None else int(value) if kind == AS_OF_DELTA else max(
                (n for n in range(len(STORY)) if close_at(n) <= dt.datetime.fromisoformat(value)), default=-1)
            columns = columns_at(max(delta, 0))
            return columns, [] if delta < 0 else [{c: r[c] for c in columns} for r in self.states[delta].values()]
        form = (StartedIn if kind == STARTED_IN else FinishedIn)(*value)
        columns = columns_at(form.last)
        return columns, [{c: r[c] for c in columns}
                         for r in expected(self.versions, form, columns, lambda d: self.states[d], LAST)]


def test_the_corpus_slice_on_a_jdbc_catalog_equals_the_truth_on_both_engines(lake):
    _, _, states, _, cfg, _, _ = lake
    truth, answered = Truth(states), 0
    for query in reinsert_queries():
        want = oracle(query, truth)
        for engine in ("duckdb", "spark"):
            got = answer_sql(query, cfg, engine=engine).rows
            assert (got.column_names, normal(got.to_pylist())) == want, f"{engine}: {query}"
        answered += bool(want[1])
    assert answered == len(reinsert_queries())


def test_a_change_streams_view_answers_every_form_as_the_oracle(lake):
    """The stream's view: its data columns (not the lake's own `_order`, `_tombstone`,
    `_event_time_us`), tombstones left out, and each form's WHERE equal to test_stream_history's
    oracle (the versions by the stream's rules)."""
    session, _, _, _, cfg, _, (states, applied) = lake
    view, columns, last = view_ident(CATALOG, CS, T), ["id", "a", "b", "c"], len(states) - 1
    assert session.table(view).columns == [*columns, *SYSTEM]
    versions = stream_versions(states, applied)
    checked = 0
    for form in [*(AsOfDelta(n) for n in range(last + 1)), StartedIn(0, last), StartedIn(3, 8), FinishedIn(0, last),
                 FinishedIn(1, 8), FinishedIn(2, 2)]:
        if isinstance(form, AsOfDelta):
            want = list(states[form.delta].values())
        else:
            want = [{c: v["row"].get(c) for c in columns} for v in selected(versions, form)]
        got = session.sql(f"SELECT {', '.join(columns)} FROM {view} WHERE ({form.where()}) "
                          f"AND (delta_num IS NULL OR delta_num <= {last})").collect()
        assert normal([r.asDict() for r in got]) == normal(want), f"{form} on the stream's view"
        checked += len(want)
    assert checked > 20


def test_an_untouched_table_reads_exact_through_its_view_at_every_delta(lake):
    """u: no commit since delta 1, only the mark moved; the docs' recipe on the view is exact."""
    session = lake[0]
    ident, view = f"{CATALOG}.{RE}.u", view_ident(CATALOG, RE, "u")
    # untouched: its current snapshot is delta 1's tagged one, and no tag came after
    tags = {r.name: r.snapshot_id for r in session.sql(f"SELECT name, snapshot_id FROM {ident}.refs").collect()}
    assert sorted(t for t in tags if t != "main") == [f"delta_{n}" for n in range(U_LAST + 1)]
    assert tags["main"] == tags[f"delta_{U_LAST}"], "no commit on u after its last change"
    # 1. L, the source's landed delta: the manifest's property (moved by deltas 2 and 3-6 alone)
    landed = int(properties(session, f"{CATALOG}.{RE}_meta.manifest")["deltaport.landed-through"])
    assert landed == LAST
    # 2. history kept, from `history-from`; R: the greater of the newest tag and the current snapshot's delta
    history_from = int(properties(session, ident)["deltaport.history-from"])
    newest_tag = session.sql(f"SELECT max(CAST(substring(name, 7) AS BIGINT)) FROM {ident}.refs WHERE type = 'TAG' "
                             f"AND name RLIKE '^delta_[0-9]+$'").collect()[0][0]
    current = session.sql(f"SELECT summary['deltaport.delta'] FROM {ident}.snapshots WHERE snapshot_id = "
                          f"(SELECT snapshot_id FROM {ident}.refs WHERE name = 'main')").collect()[0][0]
    r = max(newest_tag, int(current))
    assert r == U_LAST
    states = u_states()
    for n in range(landed + 1):
        assert n >= history_from - 1, "the history answers every delta here"
        got = session.sql(f"SELECT id, v FROM {view} WHERE ({AsOfDelta(n).where()}) "
                          f"AND (delta_num IS NULL OR delta_num <= {r})").collect()
        assert sorted(tuple(x) for x in got) == sorted((x["id"], x["v"]) for x in states[n].values()), \
            f"u AS OF DELTA_NUM {n} on the view"
    versions = oracle_versions(list(range(LAST + 1)), lambda d: [({"id": i}, op) for i, _, op in U_STORY.get(d, [])],
                               lambda row: (row["id"],))
    for form in (StartedIn(0, LAST), StartedIn(2, LAST), FinishedIn(0, LAST), FinishedIn(1, 1), FinishedIn(2, LAST)):
        want = sorted((x["id"], x["v"], x["sys_from"], x["sys_to"])
                      for x in expected(versions, form, ["id", "v"], lambda d: states[d], LAST))
        got = session.sql(f"SELECT id, v, sys_from, sys_to FROM {view} WHERE ({form.where()}) "
                          f"AND (delta_num IS NULL OR delta_num <= {r})").collect()
        assert sorted(tuple(x) for x in got) == want, f"u {form} on the view"
    assert states[0] != states[LAST] and states[U_LAST] == states[LAST]  # the story has something to tell


def properties(session, ident: str) -> dict[str, str]:
    return {r.key: r.value for r in session.sql(f"SHOW TBLPROPERTIES {ident}").collect()}

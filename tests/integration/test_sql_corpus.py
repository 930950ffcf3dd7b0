"""`deltaport sql` (issue 41): a corpus of Prostore queries answered on the lake by both engines
(DuckDB over PyIceberg, no JVM; Spark) equal to the emulators' truth.

ONE lake (catalog `sqlc`), built once for the module, with the lake layer (no Dagster):
- `marketing`: the Prostore emulator's datamart (seed 2) through a real Kafka topic: delta 2's
  first try cancelled and its number reused, a column added before delta 2, one renamed and one
  dropped before delta 4; deltas 0-1 one by one, 2-4 and 5-6 as range runs;
- `reinsert`: one table whose keys are deleted and inserted again (test_history_forms' story);
- `hand`: a change stream (Qlik format) with duplicates, late and partial changes, tombstones and a
  key deleted and re-inserted (test_stream_history's hand-made story);
- `marketing_marts.store_names`: a user mart, one partition per delta (written as `@delta_asset`s
  are, `write_mart`).
The oracle: each query's table references replaced by the truth of what the form selects (the
emulator's state at a delta, or its versions by Prostore's rules: tests/integration/
test_history_forms.py `oracle_versions` / `expected`, test_stream_history.py's for the stream),
and the rest of the query run by DuckDB on those truth tables. Each engine's rows, sorted, must
equal the oracle's, and the same column names.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import time
from decimal import Decimal

import pytest
import yaml
from sqlglot import exp

from platform_assets.build_on_view import write_mart
from platform_assets.cli import main
from platform_assets.config import load_config
from platform_assets.sql_query import answer_sql
from resources.codecs.ddl import replay_changelog
from resources.emulator.scenario import build_scenario
from resources.lake.cdc import CdcDelta, apply_cdc_through, changes_frame, land_cdc_increments
from resources.lake.history_forms import FinishedIn, StartedIn
from resources.lake.layout import LakeLayout
from resources.lake.prostore_dialect import AS_OF_DELTA, AS_OF_TIME, STARTED_IN, parse_query
from resources.lake.prostore_snapshot import apply_snapshots
from resources.spark.session import CatalogConfig, connect
from tests.integration.test_cdc_lake import KEY, T, spark_columns
from tests.integration.test_history_forms import CONFIG, close_at, expected, land_story_delta, oracle_versions
from tests.integration.test_stream_history import applied_keys, hand_story
from tests.integration.test_stream_history import oracle_versions as stream_versions
from tests.integration.test_stream_history import selected
from tests.support.landing import land_delta, published_backup
from resources.codecs.backup import ChangelogRecord

pytestmark = pytest.mark.integration

DM, RE, CS, MART = "marketing", "reinsert", "hand", "store_names"
REINSERT = [  # test_history_forms' story: each delta's changes (id, v, sys_op)
    [(1, "a", 0), (2, "b", 0), (3, "c", 0)],
    [(1, "a", 1), (2, "b2", 0)],
    [(1, "a3", 0), (2, "b2", 1)],
    [(2, "b4", 0), (3, "c4", 0)],
    [(1, "a5", 0), (3, "c4", 1)],
    [],
    [(3, "c7", 0), (1, "a5", 1)],
]


class Truth:
    """What every source holds at every delta, and the versions each form selects."""

    def __init__(self, sc, reinsert_states, stream_states, stream_applied):
        self.sc = sc
        self.reinsert = reinsert_states
        self.stream = stream_states
        self.stream_versions = stream_versions(stream_states, stream_applied)
        changes = {n: [(c.row, c.sys_op, c.table) for c in sc.increments[DM][n]] for n in sc.truth[DM]}
        self.versions = {
            (DM, t): oracle_versions(sorted(sc.truth[DM]), lambda d, t=t: [(r, op) for r, op, tt in changes[d] if tt == t],
                                     lambda row, t=t: tuple(row[k] for k in sc.databases[DM].tables[t].primary_key))
            for t in ("sales", "stores")}
        self.versions[RE, "t"] = oracle_versions(list(range(len(REINSERT))),
                                                 lambda d: [({"id": i, "v": v}, op) for i, v, op in REINSERT[d]],
                                                 lambda row: (row["id"],))

    def last(self, source: str) -> int:
        return {DM: max(self.sc.truth[DM]), RE: len(REINSERT) - 1, CS: len(self.stream) - 1}[source]

    def close_times(self, source: str) -> dict[int, dt.datetime]:
        if source == DM:
            return dict(self.sc.delta_dates[DM])
        return {n: close_at(n) for n in range(self.last(source) + 1)}

    def columns(self, source: str, table: str, delta: int) -> list[str]:
        if source == DM:
            log = self.sc.databases[DM].changelog[:self.sc.ddl_versions[DM][delta]]
            return [c.name for c in replay_changelog(log)[table].columns]
        return ["id", "v"] if source == RE else ["id", "a", "b", "c"]

    def state(self, source: str, table: str, delta: int) -> dict:
        if source == DM:
            return self.sc.truth[DM][delta].get(table, {})
        if source == RE:
            return self.reinsert[delta]
        return self.stream[delta]

    def rows(self, source: str, table: str, kind: str | None, value) -> tuple[list[str], list[dict]]:
        """(columns, rows) the reference `source.table FOR SYSTEM_TIME kind value` selects."""
        if source == f"{DM}_marts":
            delta = self.last(DM) if kind is None else self._delta(DM, kind, value)
            return ["id", "name"], [{"id": r["id"], "name": r["name"]} for r in self.state(DM, "stores", delta).values()]
        if kind in (None, AS_OF_DELTA, AS_OF_TIME):
            delta = self.last(source) if kind is None else self._delta(source, kind, value)
            columns = self.columns(source, table, max(delta, 0))
            rows = [] if delta < 0 else list(self.state(source, table, delta).values())
            return columns, [{c: r.get(c) for c in columns} for r in rows]
        form = (StartedIn if kind == STARTED_IN else FinishedIn)(*value)
        columns = self.columns(source, table, form.last)
        if source == CS:
            return columns, [{c: v["row"].get(c) for c in columns} for v in selected(self.stream_versions, form)]
        want = expected(self.versions[source, table], form, columns,
                        lambda d: self.state(source, table, d), self.last(source))
        return columns, [{c: r[c] for c in columns} for r in want]

    def _delta(self, source: str, kind: str, value) -> int:
        if kind == AS_OF_DELTA:
            return int(value)
        when = dt.datetime.fromisoformat(value)
        closed = [n for n, t in self.close_times(source).items() if t <= when]
        return max(closed) if closed else -1


def oracle(query: str, truth: Truth) -> tuple[list[str], list[tuple]]:
    """The query run by DuckDB with every lake table replaced by the truth of what it selects."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    tree = parse_query(query)
    for i, table in enumerate(list(tree.find_all(exp.Table))):
        if not table.db:
            continue  # a WITH query's name
        version = table.args.get("version")
        kind = version.args["kind"] if version is not None else None
        value = None
        if version is not None:
            e = version.expression
            value = tuple(int(v.name) for v in e.expressions) if isinstance(e, exp.Tuple) else e.name
        columns, rows = truth.rows(table.db, table.name, kind, value)
        arrow = (pa.Table.from_pylist(rows) if rows else
                 pa.table({c: pa.array([], pa.null()) for c in columns})).select(columns)
        con.register(f"truth_{i}", arrow)
        table.replace(exp.Subquery(this=exp.select("*").from_(f"truth_{i}"),
                                   alias=exp.TableAlias(this=exp.to_identifier(table.alias or table.name))))
    result = con.sql(tree.sql(dialect="duckdb")).fetch_arrow_table()
    return result.column_names, normal(result.to_pylist())


def normal(rows: list[dict]) -> list[tuple]:
    """Rows as sorted tuples of comparable values: integral decimals (DuckDB's SUM) as int, zoned
    timestamps as naive UTC (Spark's), floats rounded off their last bits (sums in any order)."""
    def value(v):
        if isinstance(v, Decimal) and v == v.to_integral_value():
            return int(v)
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        if isinstance(v, float):
            return round(v, 9)
        return v
    out = [tuple(value(v) for v in r.values()) for r in rows]
    return sorted(out, key=lambda r: [(v is not None, repr(v)) for v in r])


def land_hand_story(session, layout, source: str) -> tuple[list[dict], list]:
    """test_stream_history's change stream landed as table `T` of `source` (range runs to deltas 0,
    1, 4 and the last); (its true states [{id: row}] per delta, the keys each delta applies to)."""
    story = hand_story()
    land_cdc_increments(session, layout, source, [
        CdcDelta(n, {T: changes_frame(session, changes, spark_columns())} if changes else {},
                 delta_date_us=int((close_at(n) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000)
        for n, (changes, _) in enumerate(story)])
    for n in (0, 1, 4, len(story) - 1):
        apply_cdc_through(session, layout, source, n, {T: KEY})
    return ([{k: {"id": k, "a": a, "b": b, "c": c} for k, (a, b, c) in state.items()} for _, state in story],
            applied_keys([changes for changes, _ in story], lambda ch: ch.values["id"]))


@pytest.fixture(scope="module")
def lake(spark_remote, kafka_bootstrap, tmp_path_factory):
    """The module's one lake (module docstring), its config file and its truth."""
    folder = tmp_path_factory.mktemp("sql-corpus")
    warehouse = folder / "lake"
    layout = LakeLayout("sqlc")
    session = connect(spark_remote, CatalogConfig(name=layout.catalog, warehouse=str(warehouse)))
    started = time.monotonic()
    sc = build_scenario(CONFIG)
    assert sc.cancelled[DM], "a cancelled delta whose number is reused"
    topic, index = published_backup(sc, kafka_bootstrap, folder, "sqlcorpus")
    deltas = sorted(sc.truth[DM])
    for n in deltas:
        land_delta(session, layout, kafka_bootstrap, topic, index, DM, n, apply=n in (0, 1, 4, deltas[-1]))
    stores = [(n, session.createDataFrame([(r["id"], r["name"]) for r in sc.truth[DM][n]["stores"].values()],
                                          "id long, name string")) for n in deltas]
    write_mart(session, f"{layout.catalog}.{DM}_marts.{MART}", stores)

    ddl = [ChangelogRecord(0, "t", "CREATE TABLE reinsert.t (id BIGINT NOT NULL, v VARCHAR, "
                                   "PRIMARY KEY (id)) DISTRIBUTED BY (id)")]
    states = []
    for n, changes in enumerate(REINSERT):
        states.append(land_story_delta(session, layout, RE, ddl, n, changes, states[-1] if states else {}))
        if n in (1, len(REINSERT) - 1):
            apply_snapshots(session, layout, RE, n)
    re_states = [{k: row for k, row in s.items()} for s in states]

    stream_states, applied = land_hand_story(session, layout, CS)
    print(f"sql corpus lake built in {time.monotonic() - started:.1f} s")

    config = folder / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": "s", "backup_topic": "b"},
                    {"name": RE, "format": "prostore", "signal_topic": "s2", "backup_topic": "b2"},
                    {"name": CS, "format": "qlik", "topic": "t"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `sql` reads the lake only
        "lake": {"catalog": layout.catalog, "type": "hadoop", "warehouse": str(warehouse)},
        "state_dir": str(folder / "state")}))
    return config, Truth(sc, re_states, stream_states, applied)


def corpus(truth: Truth) -> list[str]:
    d3 = truth.sc.delta_dates[DM][3].isoformat(sep=" ")
    mid = (truth.sc.delta_dates[DM][4] + (truth.sc.delta_dates[DM][5] - truth.sc.delta_dates[DM][4]) / 2)
    stores, sales = f"{DM}.stores", f"{DM}.sales"
    return [
        # every form on the emulator's datamart
        f"SELECT * FROM {stores}",
        f"SELECT * FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 0",
        f"SELECT * FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 2",  # the cancelled delta's number, reused
        f"SELECT id, name, city, region_code FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 3",  # before the rename
        f"SELECT id, town, manager FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 4",  # after it
        f"SELECT count(*) AS n FROM {sales} FOR SYSTEM_TIME AS OF DELTA_NUM 5",
        f"SELECT * FROM {sales} FOR SYSTEM_TIME STARTED IN (4, 6)",
        f"SELECT * FROM {sales} FOR SYSTEM_TIME FINISHED IN (5, 6)",
        f"SELECT id, name FROM {stores} FOR SYSTEM_TIME STARTED IN (0, 6)",
        f"select * from {stores} for system_time finished in (1, 4) as gone",
        f"SELECT id, name FROM {stores} FOR SYSTEM_TIME AS OF '{d3}'",  # exactly delta 3's close
        f"SELECT id, name FROM {stores} FOR SYSTEM_TIME AS OF '{mid.isoformat(sep=' ', timespec='seconds')}'",
        f"SELECT count(*) AS n FROM {stores} FOR SYSTEM_TIME AS OF '2000-01-01 00:00:00'",  # before delta 0: none
        # joins of tables at different system times, subqueries, aggregates
        f"SELECT now.id, old.name AS was, now.name AS is_now FROM {stores} now "
        f"JOIN {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 1 old ON old.id = now.id WHERE old.name <> now.name",
        f"SELECT s.id, f.name AS deleted_name FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 0 s "
        f"LEFT JOIN {stores} FOR SYSTEM_TIME FINISHED IN (1, 6) f ON f.id = s.id",
        f"SELECT manager IS NULL AS no_manager, count(*) AS n FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 3 "
        f"GROUP BY manager IS NULL",
        f"SELECT id FROM {stores} WHERE id NOT IN (SELECT id FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 0)",
        f"WITH changed AS (SELECT id, count(*) AS versions FROM {stores} FOR SYSTEM_TIME STARTED IN (0, 6) "
        f"GROUP BY id) SELECT versions, count(*) AS keys FROM changed GROUP BY versions",
        f"SELECT id, name FROM {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 5 ORDER BY id DESC LIMIT 3",
        f"SELECT id FROM {sales} FOR SYSTEM_TIME STARTED IN (5, 5) "
        f"UNION SELECT id FROM {sales} FOR SYSTEM_TIME FINISHED IN (5, 5)",
        f"SELECT 1 AS d, count(*) AS n, min(transaction_date) AS first FROM {sales} FOR SYSTEM_TIME AS OF DELTA_NUM 1 "
        f"UNION ALL SELECT 4, count(*), min(transaction_date) FROM {sales} FOR SYSTEM_TIME AS OF DELTA_NUM 4 "
        f"UNION ALL SELECT 6, count(*), min(transaction_date) FROM {sales}",
        # a key deleted and inserted again
        *reinsert_queries(),
        # a change stream
        f"SELECT * FROM {CS}.{T}",
        f"SELECT * FROM {CS}.{T} FOR SYSTEM_TIME AS OF DELTA_NUM 2",
        f"SELECT id, a FROM {CS}.{T} FOR SYSTEM_TIME STARTED IN (3, 8)",
        f"SELECT id, a, b, c FROM {CS}.{T} FOR SYSTEM_TIME FINISHED IN (1, 8)",
        f"SELECT sum(b) AS b, count(c) AS c FROM {CS}.{T} FOR SYSTEM_TIME AS OF DELTA_NUM 6",
        # a user mart, alone and joined with its datamart at the same delta
        f"SELECT * FROM {DM}_marts.{MART} FOR SYSTEM_TIME AS OF DELTA_NUM 3",
        f"SELECT count(*) AS n FROM {DM}_marts.{MART}",
        f"SELECT m.id, m.name FROM {DM}_marts.{MART} FOR SYSTEM_TIME AS OF DELTA_NUM 2 m "
        f"JOIN {stores} FOR SYSTEM_TIME AS OF DELTA_NUM 2 s ON s.id = m.id WHERE m.name = s.name",
    ]


def reinsert_queries() -> list[str]:
    """The corpus' queries on `reinsert.t`, REINSERT's story (tests/integration/test_versions_view.py
    runs them on a JDBC catalog too)."""
    return [
        f"SELECT * FROM {RE}.t FOR SYSTEM_TIME AS OF DELTA_NUM 2",
        f"SELECT * FROM {RE}.t FOR SYSTEM_TIME FINISHED IN (1, 2)",
        f"SELECT * FROM {RE}.t FOR SYSTEM_TIME STARTED IN (2, 3)",
        f"SELECT f.id, f.v AS deleted, s.v AS again FROM {RE}.t FOR SYSTEM_TIME FINISHED IN (2, 2) f "
        f"JOIN {RE}.t FOR SYSTEM_TIME STARTED IN (3, 3) s ON s.id = f.id",
        f"SELECT * FROM {RE}.t FOR SYSTEM_TIME AS OF '2026-01-05 12:00:00'",
        f"SELECT * FROM {RE}.t",
    ]


def test_the_corpus_equals_the_truth_on_both_engines(lake):
    config, truth = lake
    cfg = load_config(str(config))
    queries = corpus(truth)
    assert len(queries) >= 30
    answered = 0
    for engine in ("duckdb", "spark"):
        started = time.monotonic()
        for query in queries:
            want = oracle(query, truth)
            got = answer_sql(query, cfg, engine=engine).rows
            assert (got.column_names, normal(got.to_pylist())) == want, f"{engine}: {query}"
            answered += bool(want[1])
        print(f"{engine}: {len(queries)} queries in {time.monotonic() - started:.1f} s")
    assert answered > 2 * len(queries) - 6, "most queries answer rows"


def test_the_command_line(lake, capsys, monkeypatch):
    config, truth = lake

    def sql(*args):
        code = main(["sql", *args, "--config", str(config)])
        return code, capsys.readouterr()

    capsys.readouterr()
    code, out = sql(f"SELECT id, name FROM {DM}.stores FOR SYSTEM_TIME AS OF DELTA_NUM 1 ORDER BY id",
                    "--engine", "duckdb")
    assert code == 0, out.err
    want = sorted(({"id": r["id"], "name": r["name"]} for r in truth.state(DM, "stores", 1).values()),
                  key=lambda r: r["id"])
    assert [json.loads(line) for line in out.out.splitlines()] == want
    code, out = sql(f"SELECT id, v FROM {RE}.t FOR SYSTEM_TIME STARTED IN (0, 6) ORDER BY id, v",
                    "--format", "csv", "--engine", "spark")
    assert code == 0 and out.out.splitlines()[0] == "id,v" and len(out.out.splitlines()) == 1 + len(
        [v for v in truth.versions[RE, "t"]]), out
    code, out = sql(f"SELECT * FROM {DM}.sales FOR SYSTEM_TIME AS OF '{truth.sc.delta_dates[DM][4]}'",
                    "--explain", "--engine", "spark")
    assert code == 0 and "delta 4, the last closed at or before it" in out.out
    assert "`sqlc`.`marketing_history`.`sales` WHERE delta_num <= 6" in " ".join(out.out.split())
    code, out = sql(f"SELECT count(*) FROM {RE}.t FOR SYSTEM_TIME STARTED IN (2, 3)", "--explain", "--engine", "duckdb")
    assert code == 0 and "-- __scan_0: id, sys_from FROM sqlc.reinsert.t WHERE sys_from >= 2 AND sys_from <= 3" in out.out
    monkeypatch.setattr("sys.stdin", io.StringIO(f"SELECT count(*) AS n\nFROM {RE}.t FOR SYSTEM_TIME FINISHED IN (1, 6)"))
    code, out = sql("-", "--engine", "duckdb")
    assert code == 0 and json.loads(out.out) == {"n": sum(v["sys_op"] for v in truth.versions[RE, "t"])}, out
    for query, says in ((f"SELECT * FROM {DM}.sales FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA",
                         "AS OF LATEST_UNCOMMITTED_DELTA (line 1, column"),
                        (f"SELECT * FROM {DM}.sales ESTIMATE_ONLY", "ESTIMATE_ONLY (line 1, column 31)"),
                        (f"SELECT *\nFROM {DM}.sales WHERE id = (1", "syntax error at line 2, column"),
                        (f"SELECT * FROM {DM}.sales FOR SYSTEM_TIME AS OF DELTA_NUM 99", "delta 99 has not landed")):
        code, out = sql(query, "--engine", "duckdb")
        assert code == 2 and says in out.err and len(out.err.strip().splitlines()) == 1 and not out.out, out

"""The state store on both backends (a SQLite file, a real PostgreSQL server): the same answers,
versioned schemas, and writers racing from two processes (a daemon and a `sync`, or two hosts)
that never index or seal anything twice: every delta sealed once, with the offsets a lone
writer gives."""

from __future__ import annotations

import multiprocessing
import uuid

import pytest

from resources.changestream.ledger import CdcLedger
from resources.changestream.sealing import SealPolicy, seal_topic
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.prostore.delta_index import DeltaIndex
from resources.prostore.ingest import ingest_topic
from resources.state.cursors import SyncCursors
from resources.state import store as store_module
from resources.state.store import StateStore, StateStoreError
from tests.support.postgres import PASSWORD_ENV
from tests.support.racers import index_racer, report, seal_racer

pytestmark = pytest.mark.integration

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path) -> StateStore:
    """An empty state store of each backend."""
    if request.param == "sqlite":
        return StateStore(tmp_path / "state.sqlite")
    return StateStore(request.getfixturevalue("postgres").database(), password_env=PASSWORD_ENV)


def test_schema_is_versioned_and_a_newer_one_is_refused(store):
    assert store.migrate("thing", ["CREATE TABLE t1 (a INTEGER PRIMARY KEY)"]) == 1
    # A new deltaport adds migration 2: it runs once; the old statements are not re-run.
    fresh = StateStore(store.url, password_env=store.password_env)
    assert fresh.migrate("thing", ["CREATE TABLE t1 (a INTEGER PRIMARY KEY)", "ALTER TABLE t1 ADD COLUMN b BLOB"]) == 2
    with fresh.transaction("thing") as db:
        db.execute("INSERT INTO t1 VALUES (?, ?)", (1 << 40, b"\x00\xff"))  # BIGINT, bytes
    with fresh.connect() as db:
        assert db.execute("SELECT a, b FROM t1").fetchall() == [(1 << 40, b"\x00\xff")]
    # An old deltaport on a store a newer one migrated: refused with what to do.
    old = StateStore(store.url, password_env=store.password_env)
    with pytest.raises(StateStoreError, match="schema version 2; this deltaport knows up to 1: upgrade deltaport"):
        old.migrate("thing", ["CREATE TABLE t1 (a INTEGER PRIMARY KEY)"])


def _cut(postgres, store: StateStore) -> None:
    """Terminate the store's PostgreSQL sessions from outside (what a restart or failover does),
    and wait until they are gone (the terminate only signals them)."""
    import time

    import psycopg2

    conn = psycopg2.connect(postgres.url, password=postgres.password)
    try:
        conn.autocommit = True
        db = store.url.rsplit("/", 1)[1]
        cur = conn.cursor()
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,))
        pids = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s::int[])", (pids,))
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.02)
    finally:
        conn.close()


def test_a_kept_connection_the_server_cut_is_replaced_and_a_cut_in_a_transaction_is_a_typed_error(postgres,
                                                                                                  monkeypatch):
    store = StateStore(postgres.database(), password_env=PASSWORD_ENV)
    store.migrate("thing", ["CREATE TABLE t3 (a INTEGER PRIMARY KEY)"])
    with store.transaction("thing") as db:
        db.execute("INSERT INTO t3 VALUES (?)", (1,))
    _cut(postgres, store)  # while the connection is kept, idle
    with store.transaction("thing") as db:  # a new connection, no error
        db.execute("INSERT INTO t3 VALUES (?)", (2,))
    # The same when the kept connection does not show the cut yet: its BEGIN finds it lost,
    # and the transaction begins again on a new one.
    _cut(postgres, store)
    monkeypatch.setattr(store_module, "_ended_by_server", lambda conn: False)
    with store.transaction("thing") as db:
        db.execute("INSERT INTO t3 VALUES (?)", (5,))
    monkeypatch.undo()
    with pytest.raises(StateStoreError, match=r"the connection was lost .*retried by the next tick"):
        with store.transaction("thing") as db:
            db.execute("INSERT INTO t3 VALUES (?)", (3,))
            _cut(postgres, store)  # in the middle of the transaction: it rolls back
            db.execute("INSERT INTO t3 VALUES (?)", (4,))
    with store.connect() as db:
        assert [r[0] for r in db.execute("SELECT a FROM t3 ORDER BY a")] == [1, 2, 5]


def test_a_failed_transaction_leaves_nothing(store):
    store.migrate("thing", ["CREATE TABLE t2 (a INTEGER PRIMARY KEY)"])
    with pytest.raises(ZeroDivisionError):
        with store.transaction("thing") as db:
            db.execute("INSERT INTO t2 VALUES (?)", (1,))
            1 / 0
    with store.transaction("thing") as db:  # the connection is usable again
        db.execute("INSERT INTO t2 VALUES (?)", (2,))
    with store.connect() as db:
        assert db.execute("SELECT a FROM t2").fetchall() == [(2,)]


def test_sync_cursors_and_one_sync_per_source(store):
    cursors = SyncCursors(store)
    assert cursors.get("marketing") is None
    cursors.put("marketing", '{"last": 3}')
    cursors.put("marketing", '{"last": 4}')
    assert SyncCursors(StateStore(store.url, password_env=store.password_env)).get("marketing") == '{"last": 4}'
    other = SyncCursors(StateStore(store.url, password_env=store.password_env))  # another process or host
    with cursors.hold("marketing") as held:
        assert held
        with other.hold("marketing") as second, other.hold("sales") as elsewhere:
            assert not second and elsewhere
    with other.hold("marketing") as after:
        assert after


def test_postgres_errors_name_the_store_never_the_password(postgres, monkeypatch):
    url = postgres.database()
    monkeypatch.setenv("DP_WRONG_PASSWORD", "not-the-password-s3cr3t")
    with pytest.raises(StateStoreError) as err:
        DeltaIndex(StateStore(url, password_env="DP_WRONG_PASSWORD"))
    assert "password authentication failed" in str(err.value) and url in str(err.value)
    assert "s3cr3t" not in str(err.value) and err.value.__cause__ is None
    with pytest.raises(StateStoreError, match="DP_UNSET_PASSWORD .* is not set"):
        DeltaIndex(StateStore(url, password_env="DP_UNSET_PASSWORD"))


def _race(target, args_of, n=2):
    """Start n processes running `target`; yields the event that tells them the traffic is all
    published, then the calls each made (after they finished)."""
    ctx = multiprocessing.get_context("spawn")
    done, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=report, args=(results, target, (*args_of(i), done, 7 + 4 * i))) for i in range(n)]
    for p in procs:
        p.start()
    try:
        yield done
        got = [results.get(timeout=300) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    failed = [g for g in got if isinstance(g, str)]
    assert not failed, failed[0]
    yield got


def _published_in_waves(messages, bootstrap, topics, done, waves=4):
    for w in range(waves):
        publish(messages[w * len(messages) // waves:(w + 1) * len(messages) // waves], bootstrap, topics)
    done.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_racing_indexers_index_each_message_once(kafka_bootstrap, tmp_path, request, backend):
    sc = build_scenario(EmulatorConfig(seed=5, deltas=6, streams=2, chunk_size=4, backup_partitions=2,
                                       signal_partitions=1,
                                       faults=Faults(duplicate_rate=0.1, lagging_deltas=(3,), malformed=True)))
    suffix = f"{backend}-{uuid.uuid4().hex[:10]}"
    topics = {SIGNAL: f"race.signal.{suffix}", BACKUP: f"race.backup.{suffix}"}
    create_topic(kafka_bootstrap, topics[SIGNAL], partitions=1)
    create_topic(kafka_bootstrap, topics[BACKUP], partitions=2)
    if backend == "sqlite":
        url, pw = str(tmp_path / "index.sqlite"), None
    else:
        url, pw = request.getfixturevalue("postgres").database(), PASSWORD_ENV
    kinds = {"signal": topics[SIGNAL], "backup": topics[BACKUP]}
    race = _race(index_racer, lambda i: (kafka_bootstrap, kinds, url, pw))
    _published_in_waves(sc.messages, kafka_bootstrap, topics, next(race))
    calls = next(race)
    assert all(c > 3 for c in calls), calls  # both raced through several bounded passes

    raced = DeltaIndex(StateStore(url, password_env=pw))
    alone = DeltaIndex(tmp_path / "alone.sqlite")  # one writer, one pass: the reference
    for kind, topic in kinds.items():
        ingest_topic(kafka_bootstrap, topic, alone, kind)
    for dm in sc.config.datamarts:
        assert raced.deltas(dm) == alone.deltas(dm) and raced.deltas(dm)
        for n in raced.deltas(dm):
            assert raced.chosen_messages(topics[BACKUP], dm, n) == alone.chosen_messages(topics[BACKUP], dm, n)
            assert raced.signal_events(dm, n) == alone.signal_events(dm, n)
            assert raced.writes_for_increment(dm, n) == alone.writes_for_increment(dm, n)
    assert raced.quarantine() == alone.quarantine() and raced.quarantine()


@pytest.mark.parametrize("backend", BACKENDS)
def test_racing_sealers_seal_each_delta_once_with_the_same_offsets(kafka_bootstrap, tmp_path, request, backend):
    story = build_qlik_story(QlikConfig(seed=11, transactions=40))
    topic = f"race.qlik.{backend}.{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, topic)
    if backend == "sqlite":
        url, pw = str(tmp_path / "ledger.sqlite"), None
    else:
        url, pw = request.getfixturevalue("postgres").database(), PASSWORD_ENV
    race = _race(seal_racer, lambda i: (kafka_bootstrap, topic, "src", QLIK, 5, url, pw))
    _published_in_waves(story.messages, kafka_bootstrap, {QLIK: topic}, next(race))
    calls = next(race)
    assert all(c > 3 for c in calls), calls

    raced = CdcLedger(StateStore(url, password_env=pw)).sealed_deltas("src")
    alone = CdcLedger(tmp_path / "alone.sqlite")
    policy = SealPolicy(QLIK, max_rows=5, max_seconds=30)
    seal_topic(kafka_bootstrap, topic, "src", alone, policy)
    seal_topic(kafka_bootstrap, topic, "src", alone, SealPolicy(QLIK, max_rows=5, max_seconds=30,
                                                                 seal_idle_after_seconds=0))
    want = [(d.delta_num, d.ranges, d.watermark_us, d.rows) for d in alone.sealed_deltas("src")]
    assert len(want) > 5
    assert [(d.delta_num, d.ranges, d.watermark_us, d.rows) for d in raced] == want

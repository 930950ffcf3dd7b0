"""Sealing deltas of Qlik, DataWorks and Datastream topics, against a real broker.

Each format's emulated story (with bad messages injected) is published, then sealed with small
limits in several bounded calls, across a "restart" (a new ledger object on the same file) and
retention (records deleted with the admin client). The story is the oracle: cuts fall on
transaction ends / heartbeats, and replaying the sealed deltas gives the story's truth.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import replace

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from resources.changestream.ledger import HARD, SOFT, CdcLedger, Mark, PartitionProgress, SealedDelta, Tail
from resources.codecs.cdc import BEFORE_IMAGE, DELETE, Change, Heartbeat, Record, TableSchema, TransactionMark
from resources.codecs.datastream import decode_datastream
from resources.emulator.datastream import DATASTREAM, DatastreamConfig, build_datastream_story
from resources.emulator.dataworks import ROLE as DATAWORKS, DataWorksConfig, build_dataworks_story
from resources.emulator.outgoing import Outgoing
from resources.kafka.publish import publish
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.errors import DecodeError
from resources.kafka.admin import create_topic, watermarks
from resources.changestream.sealing import SealPolicy, plan_cut, read_delta, seal_topic

pytestmark = pytest.mark.integration


# --- helpers ------------------------------------------------------------------------------


def inject(messages: list[Outgoing], bad: list[tuple[int, Outgoing, str]]) -> tuple[list[Outgoing], dict[int, str]]:
    """Insert bad messages at the given positions (of the final list); returns it and {offset: kind}
    (one partition: offset = position; several: offsets are counted per partition)."""
    out = list(messages)
    for pos, msg, _ in sorted(bad, key=lambda b: b[0]):
        out.insert(pos, msg)
    expected, seen = {}, {}
    bad_ids = {id(m): kind for _, m, kind in bad}
    for m in out:
        off = seen.get(m.partition, 0)
        seen[m.partition] = off + 1
        if id(m) in bad_ids:
            expected[(m.partition, off)] = bad_ids[id(m)]
    return out, expected


def seal_until_done(bootstrap, topic, source, ledger, policy, step) -> tuple[list[SealedDelta], int]:
    """Bounded calls until the topic is read to its end; returns the new deltas and the calls."""
    new, calls = [], 0
    while True:
        res = seal_topic(bootstrap, topic, source, ledger, policy, max_messages=step, timeout=20)
        calls += 1
        assert res.read <= step
        new += res.new_deltas
        if res.remaining == 0:
            return new, calls


def seal_in_halves(bootstrap, topic, source, path, role, messages, policy, step):
    """Publish the first half, seal it in bounded calls; publish the rest, seal it with a new
    ledger object on the same file (a restart); then an idle flush. Returns (new deltas of the
    first half, its calls, of the second half, its calls, the flush's result)."""
    half = len(messages) // 2
    publish(messages[:half], bootstrap, {role: topic})
    first, calls1 = seal_until_done(bootstrap, topic, source, CdcLedger(path), policy, step=step)
    publish(messages[half:], bootstrap, {role: topic})
    rest, calls2 = seal_until_done(bootstrap, topic, source, CdcLedger(path), policy, step=step)
    flush = seal_topic(bootstrap, topic, source, CdcLedger(path), replace(policy, seal_idle_after_seconds=0))
    return first, calls1, rest, calls2, flush


def assert_tiled(ledger: CdcLedger, source: str, bootstrap: str, topic: str, *, flushed: bool = True
                 ) -> list[SealedDelta]:
    """Deltas are numbered 0..N and tile every partition from its low watermark with no gap or
    overlap; after an idle flush, what is left unsealed has no boundary (nothing sealable left)."""
    deltas = ledger.sealed_deltas(source)
    assert [d.delta_num for d in deltas] == list(range(len(deltas)))
    marks = watermarks(bootstrap, topic)
    progress = ledger.progress(source)
    for p in marks:
        pos = 0
        for d in deltas:
            start, end = d.ranges[p]
            assert start == pos and end >= start, (p, d)
            pos = end
        assert pos == progress[p].sealed_to
        assert progress[p].next_offset == marks[p][1]
    if flushed:
        assert all(m.kind not in (HARD, SOFT) for ms in ledger.tail(source).marks.values() for m in ms)
    return deltas


def delta_records(bootstrap, ledger, source, fmt, n) -> list[tuple[int, int, list[Record] | None]]:
    """(partition, offset, records or None if bad) of delta n, read from Kafka."""
    return [(msg.partition, msg.offset, None if isinstance(r, DecodeError) else r)
            for msg, r in read_delta(bootstrap, ledger, source, n, fmt, timeout=20)]


def replay(records: Iterable[Record]) -> dict[str, dict[tuple, dict]]:
    """Apply changes as the lake would: dedupe by event_id, drop BEFORE_IMAGEs, apply in order-key
    order, captured columns only; NULLs dropped so "absent" and "null" compare equal."""
    seen, changes = set(), []
    for r in records:
        if isinstance(r, Change) and r.operation != BEFORE_IMAGE and r.event_id not in seen:
            seen.add(r.event_id)
            changes.append(r)
    state: dict[str, dict[tuple, dict]] = {}
    for c in sorted(changes, key=lambda c: c.order_key):
        table = state.setdefault(c.table if c.source != "datastream" else f"{c.namespace}.{c.table}", {})
        key = tuple(c.values[k] for k in c.key_columns)
        if c.operation == DELETE:
            table.pop(key, None)
        elif c.captured is None:
            table[key] = dict(c.values)
        else:
            table[key] = {**table.get(key, {}), **{k: v for k, v in c.values.items() if k in c.captured}}
    return normalized(state)


def normalized(state: dict) -> dict:
    return {t: {k: {c: v for c, v in row.items() if v is not None} for k, row in rows.items()}
            for t, rows in state.items() if rows}


def delete_up_to(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()])
    for f in futures.values():
        f.result(timeout=30)


def restart_retention_and_determinism(kafka_bootstrap, topic, source, path, policy, deltas, tmp_path):
    """A new ledger object on the same file seals nothing twice; sealing the same topic from
    scratch in one call gives the same deltas (one partition); retention changes none."""
    again = seal_topic(kafka_bootstrap, topic, source, CdcLedger(path), policy)
    assert again.new_deltas == [] and again.read == 0
    assert CdcLedger(path).sealed_deltas(source) == deltas
    if len(deltas[0].ranges) == 1:
        fresh = CdcLedger(tmp_path / "one-shot.sqlite")
        seal_topic(kafka_bootstrap, topic, source, fresh, policy)
        seal_topic(kafka_bootstrap, topic, source, fresh, replace(policy, seal_idle_after_seconds=0))
        assert [(d.ranges, d.watermark_us, d.rows) for d in fresh.sealed_deltas(source)] == \
            [(d.ranges, d.watermark_us, d.rows) for d in deltas]
    middle = deltas[len(deltas) // 2]
    delete_up_to(kafka_bootstrap, topic, {p: s for p, (s, _) in middle.ranges.items()})
    after = seal_topic(kafka_bootstrap, topic, source, CdcLedger(path), policy)
    assert after.new_deltas == [] and CdcLedger(path).sealed_deltas(source) == deltas
    return middle


# --- a pure check of the cut rules --------------------------------------------------------


def test_cut_rules_on_marks():
    policy = SealPolicy("dataworks", max_rows=3, max_seconds=10)
    s = 1_000_000

    def tail(marks: list[Mark], prev=None) -> Tail:
        parts = {m.partition for m in marks}
        return Tail("x", "t", 0, prev, {p: PartitionProgress(100, 0) for p in parts},
                    {p: [m for m in marks if m.partition == p] for p in parts})

    # Rows exceeded at offset 4: the last boundary before it (a soft TRANSACTION_END) is the cut.
    ms = [Mark(0, 0, "none", s, s, 1), Mark(0, 1, SOFT, s, s, 0), Mark(0, 2, "none", s, s, 2),
          Mark(0, 3, HARD, 2 * s, 2 * s, 0), Mark(0, 4, "none", 3 * s, 3 * s, 1)]
    cut, _ = plan_cut(tail(ms), policy)
    assert cut.ends == {0: 4} and cut.reason == "rows"
    # Time exceeded: only hard boundaries count.
    ms = [Mark(0, 0, "none", s, s, 1), Mark(0, 1, SOFT, s, s, 0), Mark(0, 2, HARD, 5 * s, 5 * s, 0),
          Mark(0, 3, SOFT, 9 * s, 9 * s, 0), Mark(0, 4, "none", 20 * s, 20 * s, 1)]
    cut, _ = plan_cut(tail(ms), policy)
    assert cut.ends == {0: 3} and cut.reason == "time" and cut.watermark_us == 5 * s
    # One transaction longer than max_rows: wait for its end, then cut there with a warning.
    ms = [Mark(0, i, "none", s, s, 1) for i in range(5)]
    cut, why = plan_cut(tail(ms), policy)
    assert cut is None and "longer than max_rows" in why
    cut, _ = plan_cut(tail(ms + [Mark(0, 5, SOFT, s, s, 0)]), policy)
    assert cut.ends == {0: 6} and cut.warning
    # Nothing exceeded: wait, unless flushing an idle source.
    ms = [Mark(0, 0, HARD, s, s, 1), Mark(0, 1, "none", s, s, 1)]
    assert plan_cut(tail(ms), policy)[0] is None
    assert plan_cut(tail(ms), policy, flush=True)[0].ends == {0: 1}
    # Two partitions: each ends at its last boundary up to the cut's watermark; a quiet one is empty.
    ms = [Mark(0, 0, HARD, s, s, 1), Mark(1, 7, HARD, 2 * s, 2 * s, 1), Mark(0, 1, HARD, 3 * s, 3 * s, 1),
          Mark(1, 8, HARD, 4 * s, 4 * s, 1)]
    cut, _ = plan_cut(tail(ms), policy)
    assert cut.ends == {0: 2, 1: 8} and cut.watermark_us == 3 * s


# --- Qlik ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "avro-envelope"])
def test_qlik_deltas_end_at_transaction_ends(kafka_bootstrap, tmp_path, fmt):
    story = build_qlik_story(QlikConfig(seed=11, format=fmt))
    first_data = next(m for m in story.messages if m.note.startswith("DT:INSERT"))
    # The same story in JSON gives the bodies of the bad messages (the decoder takes both forms).
    json_story = build_qlik_story(QlikConfig(seed=11))
    body = json.loads(next(m for m in json_story.messages if m.note == first_data.note).value)
    unknown_op = json.dumps({**body, "headers": {**body["headers"], "operation": "MERGE"}}).encode()
    bad_mask = json.dumps({**body, "headers": {**body["headers"], "columnMask": "ZZ"}}).encode()
    messages, expected = inject(story.messages, [
        (0, replace(first_data, note="early copy"), "qlik_no_metadata"),  # data before its table's metadata
        (20, Outgoing(QLIK, 0, None, b'{"schema": "SALES", "headers": {', "broken"), "qlik_bad_json"),
        (30, Outgoing(QLIK, 0, None, b'{"hello": "world"}', "envelope"), "qlik_bad_envelope"),
        (41, Outgoing(QLIK, 0, None, unknown_op, "op"), "qlik_unknown_operation"),
        (52, Outgoing(QLIK, 0, None, bad_mask, "mask"), "qlik_bad_mask"),
    ])
    topic, source, path = f"seal.qlik.{fmt}.{os.getpid()}", "qlik_src", tmp_path / "ledger.sqlite"
    create_topic(kafka_bootstrap, topic)
    policy = SealPolicy("qlik", max_rows=5, max_seconds=30)
    first, calls1, rest, calls2, flush = seal_in_halves(kafka_bootstrap, topic, source, path, QLIK, messages,
                                                         policy, step=13)
    assert calls1 + calls2 > 5 and first and rest
    ledger = CdcLedger(path)
    deltas = assert_tiled(ledger, source, kafka_bootstrap, topic)
    assert [d.delta_num for d in first + rest + flush.new_deltas] == [d.delta_num for d in deltas]

    # Bad messages: quarantined with their coordinates, and the good ones went on.
    got = {(q["partition"], q["offset"]): q["kind"] for q in ledger.quarantine(source)}
    assert got == expected and all(q["topic"] == topic for q in ledger.quarantine(source))

    # Cuts: every delta ends at a transaction end (or a metadata / REFRESH message), no
    # transaction spans two deltas, rows keep the limit unless one transaction is longer.
    ends = set(story.transaction_ends)
    warned = False
    txn_delta: dict[str, set[int]] = {}
    state_records: list[Record] = []
    compared, high = 0, (-3,)
    for d in deltas:
        recs = delta_records(kafka_bootstrap, ledger, source, "qlik", d.delta_num)
        assert [o for _, o, _ in recs] == list(range(*d.ranges[0]))
        good = [r for _, _, rs in recs if rs for r in rs]
        assert d.rows == sum(1 for r in good if isinstance(r, Change) and r.operation != BEFORE_IMAGE)
        last = recs[-1][2]
        assert last, f"delta {d.delta_num} ends on a bad message"
        change = last[-1]
        assert isinstance(change, TableSchema) or change.is_backfill or (
            change.last_in_transaction and change.order_key in ends), (d, change)
        fresh = [r for r in good if isinstance(r, Change) and r.transaction_id and r.order_key > high]
        for r in fresh:  # first deliveries only: a late copy may land in a later delta
            txn_delta.setdefault(r.transaction_id, set()).add(d.delta_num)
        high = max([high] + [r.order_key for r in good if isinstance(r, Change)])
        state_records += good
        if isinstance(change, Change) and change.last_in_transaction:
            assert replay(state_records) == normalized(story.state_after(change.order_key)), d.delta_num
            compared += 1
        if d.rows > policy.max_rows:  # only one transaction longer than the limit may do that
            assert len({r.transaction_id for r in fresh}) == 1 and d.reason == "rows", d
            warned = True
    assert compared >= 5 and warned
    assert all(len(ds) == 1 for ds in txn_delta.values()), txn_delta

    # Restart, determinism, retention; then a late delta still decodes: the ledger kept the metadata.
    middle = restart_retention_and_determinism(kafka_bootstrap, topic, source, path, policy, deltas, tmp_path)
    assert middle.delta_num > 0 and ledger.metadata_messages(source, upto=middle.delta_num)
    recs = delta_records(kafka_bootstrap, ledger, source, "qlik", middle.delta_num)
    assert recs and all(rs is not None for p, o, rs in recs if (p, o) not in expected)


# --- DataWorks ----------------------------------------------------------------------------


def test_dataworks_deltas_end_at_heartbeats_and_transaction_ends(kafka_bootstrap, tmp_path):
    story = build_dataworks_story(DataWorksConfig(seed=5, transactions=30))
    doc = json.loads(next(m for m in story.messages if "INSERT" in m.note).value)
    unknown = json.dumps({**doc, "payload": {**doc["payload"], "op": "UPSERT"}}).encode()
    messages, expected = inject(story.messages, [
        (15, Outgoing(DATAWORKS, 0, b"", b'{"schema": {"dataColumn": [', "broken"), "dataworks_bad_json"),
        (60, Outgoing(DATAWORKS, 0, b"", b'{"payload": {}}', "envelope"), "dataworks_bad_envelope"),
        (101, Outgoing(DATAWORKS, 0, b"", unknown, "op"), "dataworks_unknown_op"),
    ])
    topic, source, path = f"seal.dataworks.{os.getpid()}", "dw_src", tmp_path / "ledger.sqlite"
    create_topic(kafka_bootstrap, topic)
    policy = SealPolicy("dataworks", max_rows=8, max_seconds=40)
    seal_in_halves(kafka_bootstrap, topic, source, path, DATAWORKS, messages, policy, step=40)
    ledger = CdcLedger(path)
    deltas = assert_tiled(ledger, source, kafka_bootstrap, topic)
    assert len(deltas) > 8
    got = {(q["partition"], q["offset"]): q["kind"] for q in ledger.quarantine(source)}
    assert got == expected

    beat_times = {t for t, _ in story.heartbeats}
    end_keys = {k for _, k in story.transaction_ends}
    records: list[Record] = []
    kinds = set()
    high, open_txns = (-1,), 0
    for d in deltas:
        recs = delta_records(kafka_bootstrap, ledger, source, "dataworks", d.delta_num)
        good = [r for _, _, rs in recs if rs for r in rs]
        for r in good:  # first deliveries only: never a delta end inside a transaction
            if isinstance(r, TransactionMark) and r.order_key > high:
                open_txns += 1 if r.kind == "begin" else -1
            if getattr(r, "order_key", None):
                high = max(high, r.order_key)
        assert open_txns == 0, f"delta {d.delta_num} ends inside a transaction"
        assert d.rows == sum(1 for r in good if isinstance(r, Change) and r.operation != BEFORE_IMAGE)
        last = recs[-1][2]
        assert last and len(last) == 1, d
        (boundary,) = last
        if isinstance(boundary, Heartbeat):
            assert boundary.event_time_us in beat_times
            kinds.add("heartbeat")
        else:
            assert isinstance(boundary, TransactionMark) and boundary.kind == "end" and boundary.order_key in end_keys
            kinds.add(f"end:{d.reason}")
        records += good
        keyed = [r.order_key for r in records if isinstance(r, (Change, TransactionMark)) and r.order_key]
        assert replay(records) == normalized(story.state_after(max(keyed))), d.delta_num
    assert "heartbeat" in kinds and "end:rows" in kinds, kinds

    restart_retention_and_determinism(kafka_bootstrap, topic, source, path, policy, deltas, tmp_path)


# --- Datastream ---------------------------------------------------------------------------


def test_datastream_deltas_on_two_partitions_replay_to_the_final_truth(kafka_bootstrap, tmp_path):
    story = build_datastream_story(DatastreamConfig(seed=3, steps=150, partitions=2))
    messages, expected = inject(story.messages, [
        (10, Outgoing(DATASTREAM, 0, b"x", b'{"uuid": "1", ', "broken"), "bad_json"),
        (90, Outgoing(DATASTREAM, 1, b"x", b'{"read_method": "mysql-cdc-binlog"}', "envelope"),
         "datastream_bad_envelope"),
    ])
    topic, source, path = f"seal.datastream.{os.getpid()}", "ds_src", tmp_path / "ledger.sqlite"
    create_topic(kafka_bootstrap, topic, partitions=2)
    policy = SealPolicy("datastream", max_rows=40, max_seconds=60, lateness_seconds=30)
    seal_in_halves(kafka_bootstrap, topic, source, path, DATASTREAM, messages, policy, step=50)
    ledger = CdcLedger(path)
    deltas = assert_tiled(ledger, source, kafka_bootstrap, topic)
    assert sum(d.messages for d in deltas) == len(messages), "every message sealed after the idle flush"
    assert len(deltas) > 5 and all(d.rows <= policy.max_rows for d in deltas)
    got = {(q["partition"], q["offset"]): q["kind"] for q in ledger.quarantine(source)}
    assert got == expected
    wms = [d.watermark_us for d in deltas]
    assert wms == sorted(wms)

    records = [r for d in deltas for _, _, rs in delta_records(kafka_bootstrap, ledger, source, "datastream",
                                                                d.delta_num) if rs for r in rs]
    final = story.state_at(story.last_event_time_us)
    assert replay(records) == normalized(final)

    restart_retention_and_determinism(kafka_bootstrap, topic, source, path, policy, deltas, tmp_path)


def test_datastream_delta_holds_every_event_up_to_its_watermark(kafka_bootstrap, tmp_path):
    """One partition: an event no later than the lateness bound is sealed by its time's delta."""
    story = build_datastream_story(DatastreamConfig(seed=8, steps=120))
    times = {}
    for m in story.messages:
        for c in decode_datastream(m.key, m.value):
            times.setdefault(c.event_id, c.event_time_us)
    topic, source = f"seal.datastream1.{os.getpid()}", "ds1"
    create_topic(kafka_bootstrap, topic)
    publish(story.messages, kafka_bootstrap, {DATASTREAM: topic})
    ledger = CdcLedger(tmp_path / "ledger.sqlite")
    policy = SealPolicy("datastream", max_rows=1000, max_seconds=45, lateness_seconds=story.max_lateness_us / 1e6)
    seal_until_done(kafka_bootstrap, topic, source, ledger, policy, step=70)
    deltas = assert_tiled(ledger, source, kafka_bootstrap, topic, flushed=False)
    assert len(deltas) > 5
    sealed: set[str] = set()
    for d in deltas:
        sealed |= {r.event_id for _, _, rs in delta_records(kafka_bootstrap, ledger, source, "datastream",
                                                             d.delta_num) for r in rs or ()}
        assert {e for e, t in times.items() if t <= d.watermark_us} <= sealed, d.delta_num

"""Faults in figures (issue 11): kills at chosen points of a run (bench/fault_kills.py: `sync`
SIGKILLed, the next one converges, compared with the truth), the Spark server or the broker
broken under a run (bench/fault_restarts.py), `sync` killed while it starts the embedded Spark
server (bench/fault_spark_start.py: no server left unrecorded), PostgreSQL (the state store and the Dagster instance)
restarted under a run and a tick (bench/fault_postgres.py), a run worker and the daemon killed under the Dagster
daemon (bench/fault_daemon.py), a soak of 500 deltas through the daemon with faults sprinkled in and
memory sampled (bench/fault_soak.py), Kafka over SASL_SSL with ACLs: right, wrong and
denied credentials, the password never written anywhere (bench/fault_security.py), a bad chunk
inside a backlog that must not stop the good deltas before it (bench/fault_bad_chunk.py), bad
input at scale through the real broker (below), `sync` killed inside a retirement pass of the
partition window (bench/fault_retirement.py: nothing lost, no delta half-retired), and numbers no
writer sends in every numeric field, read under a memory cap (bench/fault_numbers.py for Prostore: inspect and the sensor's
ingest; bench/fault_stream_numbers.py for Qlik, DataWorks, Datastream: the sealer; peak RSS and
seconds).

For each of the five wire formats (Prostore backup increments: Avro containers; Prostore signal
events: JSON; Qlik Replicate, DataWorks, Datastream: JSON) an emulated story's messages go to a
topic of their own with seeded corruptions mixed in: copies of the story's messages truncated,
bit-flipped, replaced by garbage, turned to wrong JSON types or unknown enum values, emptied,
or padded to an oversized value; and exact duplicates of good messages. Then the sensor's own
reading code runs over the topic in bounded ticks (`ingest_topic` into a delta index for
Prostore, `seal_topic` into a change-stream ledger for the others), as the daemon would.

What is checked, per format (a row of the report):
- no tick raises: a bad message never stops the ones after it;
- every message read is accounted for: indexed or quarantined, none skipped (`read` equals the
  messages produced);
- every corruption that cannot be valid (garbage that is not UTF-8 nor Avro, a JSON value cut
  short) is quarantined with its topic, partition and offset;
- no good message (an original or an exact duplicate) is quarantined;
- the remaining corruptions are counted either way (a flipped bit inside a string is still a
  valid message: the codec cannot know; the lake comparison of later cases covers data);
- change streams: every corruption accepted as valid can be landed by the lake beside the
  story's good changes (each value fits a column type: `resources.lake.cdc.check_landable`): one
  that could not would fail its whole delta at the increment, and every later delta would wait.

    python bench/faults.py [--corruptions 1000] [--seed 7] [--formats backup,signal,qlik,...] [--kills CASE,...]
        [--retirement CASE,...] [--restarts CASE,...] [--spark-start CASE,...] [--postgres CASE,...] [--daemon CASE,...]
        [--security CASE,...] [--soak 250] [--soak-pace 1] [--bad-chunks CASE,...]
        [--numbers prostore,qlik,dataworks,datastream]

Report: a table on stdout and bench-results/faults.json (case, injected, survived, rows lost,
messages quarantined, good messages quarantined, seconds). `make faults` runs it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fault_kills import KILLS, print_row, publish_story, run_kill_case  # noqa: E402
from bench.fault_restarts import RESTARTS, run_restart_case  # noqa: E402
from bench.fault_retirement import DELTAS as RETIREMENT_DELTAS, RETIREMENT_CASES, run_retirement_case  # noqa: E402
from bench.fault_postgres import POSTGRES_CASES, run_postgres_case  # noqa: E402
from bench.fault_daemon import DAEMON_CASES, run_daemon_case  # noqa: E402
from bench.fault_security import SECURITY, print_security_row, run_security_cases  # noqa: E402
from bench.fault_soak import print_soak_row, run_soak  # noqa: E402
from bench.fault_spark_start import SPARK_START_CASES, run_spark_start_case  # noqa: E402
from bench.fault_bad_chunk import BAD_CHUNK_CASES, print_bad_chunk_row, run_bad_chunk_case  # noqa: E402
from bench.fault_numbers import print_numbers_row, run_numbers_case  # noqa: E402
from bench.fault_stories import fault_story, unlandable  # noqa: E402
from bench.fault_stream_numbers import STREAM_FORMATS, run_stream_numbers_case  # noqa: E402

FORMATS = ("backup", "signal", "qlik", "dataworks", "datastream")
OVERSIZED = 300_000  # bytes: well over any real message of the stories, under the broker's 1 MiB


@dataclass
class Row:
    case: str
    injected: int = 0  # corruptions produced
    must_fail: int = 0  # of them, ones that cannot be valid
    duplicates: int = 0  # exact copies of good messages
    produced: int = 0
    read: int = 0
    quarantined: int = 0
    must_fail_quarantined: int = 0
    good_quarantined: int = 0  # good messages wrongly quarantined: must be 0
    without_location: int = 0  # quarantine records lacking topic/partition/offset: must be 0
    accepted_corruptions: int = 0  # corruptions that decode as valid messages
    accepted_by_kind: dict = field(default_factory=dict)
    accepted_unlandable: int = 0  # accepted corruptions the lake could not hold (would fail their delta): must be 0
    ticks: int = 0
    seconds: float = 0.0
    crashed: str | None = None
    survived: bool = False
    kinds: dict = field(default_factory=dict)

    def judge(self) -> None:
        self.survived = (self.crashed is None and self.read == self.produced and self.good_quarantined == 0
                         and self.must_fail_quarantined == self.must_fail and self.without_location == 0
                         and self.accepted_unlandable == 0)


# --- corruptions (pure) ---------------------------------------------------------------------

def _json_or_none(value: bytes):
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None


def _paths(doc, prefix=()):
    """Every (path, value) of a JSON document's leaves and containers."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    if not path:
        return value
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


def corrupt(value: bytes, rng: random.Random) -> tuple[str, bytes | None, bool]:
    """(kind, corrupted value, whether it cannot be valid) of one message value."""
    doc = _json_or_none(value)
    kinds = ["truncate", "bitflip", "garbage", "empty", "oversized"]
    if doc is not None:
        kinds += ["wrong_type", "unknown_enum"]
    kind = rng.choice(kinds)
    if kind == "truncate":
        body = value.rstrip()
        cut = rng.randrange(1, max(2, len(body)))
        # A JSON document cut inside itself never parses; an Avro container cut at a block end may.
        return kind, body[:cut], doc is not None and cut < len(body)
    if kind == "bitflip":
        data = bytearray(value)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        return kind, bytes(data), False
    if kind == "garbage":  # 0xff starts neither UTF-8 text nor an Avro container ("Obj\x01")
        return kind, b"\xff" + rng.randbytes(max(1, len(value) - 1)), True
    if kind == "empty":
        return kind, b"", False
    if kind == "oversized":
        if doc is not None and isinstance(doc, dict):  # a huge extra string field: valid JSON, odd size
            doc["deltaport_fault_padding"] = "x" * OVERSIZED
            return kind, json.dumps(doc).encode(), False
        return kind, value + rng.randbytes(OVERSIZED), False
    leaves = [(p, v) for p, v in _paths(doc) if p and not isinstance(v, (dict, list))]
    if not leaves:
        return "garbage", b"\xff" + rng.randbytes(8), True
    path, old = rng.choice(leaves)
    if kind == "wrong_type":
        return kind, json.dumps(_set(doc, path, [old])).encode(), False
    strings = [(p, v) for p, v in leaves if isinstance(v, str) and v.isupper()]  # ops, codes, types
    path, _ = rng.choice(strings) if strings else (path, old)
    return kind, json.dumps(_set(doc, path, "DELTAPORT_UNKNOWN_VALUE")).encode(), False


def mix(messages: list, n: int, rng: random.Random, *, duplicates: int) -> list[tuple[object, bytes | None, str, bool]]:
    """The story's messages with `n` corruptions and `duplicates` exact copies inserted after
    random originals (order of the originals kept): [(message, value, kind, must_fail)], kind
    "good" for originals and "duplicate" for copies."""
    out = [(m, m.value, "good", False) for m in messages]
    values = [i for i, m in enumerate(messages) if m.value]
    inserts = []
    for _ in range(n):
        src = messages[rng.choice(values)]
        kind, value, must = corrupt(src.value, rng)
        inserts.append((src, value, kind, must))
    for _ in range(duplicates):
        src = messages[rng.choice(values)]
        inserts.append((src, src.value, "duplicate", False))
    for item in inserts:  # after its source, so a copy never comes before what it copies
        at = next(i for i, o in enumerate(out) if o[0] is item[0]) + 1 + rng.randrange(3)
        out.insert(min(at, len(out)), item)
    return out


# --- the case, per format --------------------------------------------------------------------

def run_corruption_case(bootstrap: str, fmt: str, corruptions: int, seed: int, work: Path,
                        max_messages: int = 500) -> Row:
    from resources.changestream.ledger import CdcLedger
    from resources.changestream.sealing import SealPolicy, seal_topic
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish
    from resources.prostore.delta_index import DeltaIndex
    from resources.prostore.ingest import BACKUP, SIGNAL, ingest_topic
    from resources.state.store import StateStore

    rng = random.Random(f"{seed}:{fmt}")
    items = mix(fault_story(fmt, seed), corruptions, rng, duplicates=max(1, corruptions // 10))
    row = Row(f"corrupt-{fmt}", injected=corruptions, duplicates=max(1, corruptions // 10), produced=len(items),
              must_fail=sum(1 for *_, must in items if must))
    for _, _, kind, _ in items:
        if kind not in ("good", "duplicate"):
            row.kinds[kind] = row.kinds.get(kind, 0) + 1
    topic = f"faults.{fmt}.{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    # One partition, in order: a message's offset is its index in `items`.
    publish([replace(m, partition=0, value=value) for m, value, _, _ in items], bootstrap,
            {m.role: topic for m, _, _, _ in items})
    store = StateStore(work / f"{fmt}.sqlite")
    started = time.perf_counter()
    try:
        if fmt in ("backup", "signal"):
            index = DeltaIndex(store)
            while True:
                res = ingest_topic(bootstrap, topic, index, BACKUP if fmt == "backup" else SIGNAL,
                                   max_messages=max_messages)
                row.ticks += 1
                row.read += res.read
                if not res.remaining and not res.read:
                    break
            bad = index.quarantine(topic)
        else:
            ledger = CdcLedger(store)
            policy = SealPolicy(fmt, max_rows=50)
            while True:
                res = seal_topic(bootstrap, topic, fmt, ledger, policy, max_messages=max_messages)
                row.ticks += 1
                row.read += res.read
                if not res.remaining and not res.read:
                    break
            bad = ledger.quarantine(fmt)
    except Exception as exc:  # the finding this case exists for: say what, and keep going
        row.crashed = f"{type(exc).__name__}: {str(exc)[:500]}"
        bad = []
    row.seconds = round(time.perf_counter() - started, 2)
    offsets = {b["offset"] for b in bad if b.get("topic") == topic and b.get("partition") is not None}
    row.without_location = sum(1 for b in bad if b.get("topic") != topic or b.get("partition") is None
                               or b.get("offset") is None)
    row.quarantined = len(offsets)
    for offset, (_, _, kind, must) in enumerate(items):
        if kind in ("good", "duplicate"):
            row.good_quarantined += offset in offsets
        else:
            row.must_fail_quarantined += must and offset in offsets
            if offset not in offsets:
                row.accepted_corruptions += 1
                row.accepted_by_kind[kind] = row.accepted_by_kind.get(kind, 0) + 1
    if fmt not in ("backup", "signal") and row.crashed is None:
        row.accepted_unlandable = len(unlandable(fmt, items, offsets))
    row.judge()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corruptions", type=int, default=1000, help="corrupted messages per format")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--kills", default=",".join(KILLS), help="kill cases to run (bench/fault_kills.py); '' for none")
    ap.add_argument("--retirement", default=",".join(RETIREMENT_CASES),
                    help="sync killed inside a pass of the partition window (bench/fault_retirement.py); '' for none")
    ap.add_argument("--restarts", default=",".join(RESTARTS),
                    help="restart cases to run (bench/fault_restarts.py); '' for none")
    ap.add_argument("--postgres", default=",".join(POSTGRES_CASES),
                    help="PostgreSQL restarted under a sync (bench/fault_postgres.py; a server of its own); '' for none")
    ap.add_argument("--daemon", default=",".join(DAEMON_CASES),
                    help="cases under the Dagster daemon (bench/fault_daemon.py); '' for none")
    ap.add_argument("--soak", type=int, default=250, help="deltas per datamart of the soak (two datamarts); 0: none")
    ap.add_argument("--soak-pace", type=float, default=1.0, help="seconds between two DELTA_CLOSEs of the soak")
    ap.add_argument("--security", default=",".join(SECURITY),
                    help="SASL_SSL/ACL cases to run (bench/fault_security.py); '' for none")
    ap.add_argument("--spark-start", default=",".join(SPARK_START_CASES),
                    help="sync killed while it starts the embedded Spark server (bench/fault_spark_start.py); "
                         "'' for none")
    ap.add_argument("--bad-chunks", default=",".join(BAD_CHUNK_CASES),
                    help="a bad chunk inside a backlog, through `deltaport sync` (bench/fault_bad_chunk.py); "
                         "'' for none")
    ap.add_argument("--numbers", default=",".join(("prostore", *STREAM_FORMATS)),
                    help="adversarial numbers under a memory cap (bench/fault_numbers.py, fault_stream_numbers.py); "
                         "'' for none")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "faults.json"))
    args = ap.parse_args(argv)
    from bench.engine import bench_engine
    from resources.kafka.broker import kafka_bootstrap

    rows: list = []
    with kafka_bootstrap() as bootstrap, tempfile.TemporaryDirectory(prefix="deltaport-faults-") as work:
        kills = [k for k in args.kills.split(",") if k]
        restarts = [k for k in args.restarts.split(",") if k]
        daemon = [k for k in args.daemon.split(",") if k]
        postgres = [k for k in args.postgres.split(",") if k]
        story = publish_story(bootstrap, args.seed) if kills or restarts or daemon or postgres else None
        security = [k for k in args.security.split(",") if k]
        bad_chunks = [k for k in args.bad_chunks.split(",") if k]
        retirement = [k for k in args.retirement.split(",") if k]
        if kills or security or daemon or args.soak or postgres or bad_chunks or retirement:
            with bench_engine(Path(work) / "engine") as engine:
                for case in bad_chunks:
                    row = run_bad_chunk_case(bootstrap, engine.url, case, Path(work) / "bad-chunks", seed=args.seed)
                    rows.append(row)
                    print_bad_chunk_row(row)
                for case in kills:
                    row = run_kill_case(bootstrap, engine.url, story, case, KILLS[case], Path(work) / "kills")
                    rows.append(row)
                    print_row(row)
                if retirement:  # a story of its own: the window needs more deltas than the kills' range
                    deltas = publish_story(bootstrap, args.seed, deltas=RETIREMENT_DELTAS, prefix="retirement")
                    for case in retirement:
                        row = run_retirement_case(bootstrap, engine.url, deltas, case, Path(work) / "retirement")
                        rows.append(row)
                        print_row(row)
                if postgres:
                    from tests.support.postgres import start_postgres

                    server = start_postgres()  # restarted by the cases
                    try:
                        for case in postgres:
                            row = run_postgres_case(bootstrap, engine.url, story, case, Path(work) / "postgres", server)
                            rows.append(row)
                            print_row(row)
                    finally:
                        server.stop()
                for case in daemon:
                    row = run_daemon_case(bootstrap, engine.url, story, case, Path(work) / "daemon")
                    rows.append(row)
                    print_row(row)
                if args.soak:
                    row = run_soak(bootstrap, engine.url, Path(work) / "soak", deltas=args.soak, pace=args.soak_pace,
                                   seed=args.seed, spark_pid=engine.server_pid)
                    rows.append(row)
                    print_soak_row(row)
                if security:
                    for row in run_security_cases(engine.url, Path(work) / "security", seed=args.seed, cases=security,
                                                  extra_logs=(engine.log_path,) if engine.log_path else ()):
                        rows.append(row)
                        print_security_row(row)
        for case in restarts:  # each on an embedded server of its own, as `make demo` runs
            row = run_restart_case(bootstrap, story, case, Path(work) / "restarts", seed=args.seed)
            rows.append(row)
            print_row(row)
        for case in [k for k in args.spark_start.split(",") if k]:  # each on an embedded server of its own
            story = story or publish_story(bootstrap, args.seed)
            row = run_spark_start_case(bootstrap, story, case, Path(work) / "spark-start")
            rows.append(row)
            print_row(row)
        for fmt in [f for f in args.formats.split(",") if f]:
            row = run_corruption_case(bootstrap, fmt, args.corruptions, args.seed, Path(work))
            rows.append(row)
            print(f"{row.case:<20} injected {row.injected:>5} (must fail {row.must_fail:>4}), read {row.read:>5}/"
                  f"{row.produced:<5} quarantined {row.quarantined:>5}, good quarantined {row.good_quarantined}, "
                  f"corruptions accepted as valid {row.accepted_corruptions:>4} (the lake could not land "
                  f"{row.accepted_unlandable}), {row.seconds:>6.1f} s, "
                  f"survived {row.survived}" + (f"  CRASH {row.crashed}" if row.crashed else ""), flush=True)
        for case in [c for c in args.numbers.split(",") if c]:
            if case == "prostore":
                rows.append(run_numbers_case(bootstrap, Path(work), seed=args.seed))
            else:
                rows.append(run_stream_numbers_case(bootstrap, case, Path(work), seed=args.seed))
            print_numbers_row(rows[-1])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"config": vars(args), "cases": [asdict(r) for r in rows]}, indent=1))
    print(f"wrote {args.out}")
    return 0 if all(r.survived for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

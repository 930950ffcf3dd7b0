"""Benchmark of the change-stream path (Qlik, DataWorks, Datastream) from Kafka to Iceberg, against
the script a user would write and against the floor. Not a test: speeds are ratios to baselines run
in this same process, on this machine, never asserted. Row counts and the final state are checked
(a fast wrong answer is no answer); a mismatch fails the run after the report is written.

One process, real parts: an Apache Kafka broker (embedded, or $KAFKA_BOOTSTRAP_SERVERS), a local[2]
Spark session with an Iceberg Hadoop catalog in a temporary warehouse, the ledger in a temporary
SQLite file. Per format, the emulator's story scaled by `--size` is published to its own topic, then:
- ours: `seal_topic` in sensor-sized calls (then an idle flush), and per sealed delta what the
  assets do: read it back (`read_delta`), land the changelog, land the increment
  (`changes_frame` + `land_cdc_increment`), apply the snapshot (`apply_cdc_through`);
- (a) user script: consume the topic with confluent-kafka, decode with the same decoder, write the
  row changes as Parquet, one file per table per delta (no order, no de-duplication, no state);
- (b) floor: consume and decode only.
Reported: rows/s of ours (seal + increment, and with the snapshot) over rows/s of (a) and (b);
peak memory of this process, the Spark JVM and its workers (bench/peak_memory.py).

Usage:  .venv/bin/python bench/stream_bench.py [--size 400] [--max-rows 400] [--formats qlik,dataworks,datastream]
            [--out bench-results/streams.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine import bench_engine  # noqa: E402
from bench.peak_memory import PeakMemory  # noqa: E402
from platform_assets.cli.emulate_cmd import stream_story  # noqa: E402
from resources.changestream.ledger import CdcLedger  # noqa: E402
from resources.codecs.cdc import BEFORE_IMAGE, Change  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.emulator.stream_oracle import final_truth, same_rows  # noqa: E402
from resources.errors import DecodeError  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.scan import scan  # noqa: E402
from resources.lake.cdc import (  # noqa: E402
    apply_cdc_through,
    cdc_rows_as_of,
    changes_frame,
    increment_columns,
    infer_columns,
    land_cdc_increment,
)
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.stream_changelog import (  # noqa: E402
    changelog_entries,
    changes_by_table,
    land_stream_changelog,
)
from resources.lake.stream_keys import current_keys  # noqa: E402
from resources.changestream.sealing import SealPolicy, make_decoder, read_delta, seal_topic  # noqa: E402

log = logging.getLogger("bench")
STEP = 5000  # messages per sealing call, as `sensor.max_messages_per_tick`


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("inf")


def ours(spark, bootstrap: str, layout: LakeLayout, ledger: CdcLedger, source: str, fmt: str, topic: str,
         policy: SealPolicy) -> dict:
    t0 = time.perf_counter()
    while seal_topic(bootstrap, topic, source, ledger, policy, max_messages=STEP).remaining:
        pass
    seal_topic(bootstrap, topic, source, ledger, SealPolicy(**{**policy.__dict__, "seal_idle_after_seconds": 0}))
    seal_s = time.perf_counter() - t0
    increment_s = snapshot_s = 0.0
    rows = 0
    deltas = ledger.sealed_deltas(source)
    for d in deltas:
        t1 = time.perf_counter()
        good = [(m.partition, m.offset, rs) for m, rs in read_delta(bootstrap, ledger, source, d.delta_num, fmt)
                if not isinstance(rs, DecodeError)]
        land_stream_changelog(spark, layout, source, d.delta_num, changelog_entries(good))
        by_table = changes_by_table(r for _, _, rs in good for r in rs)
        frames = {t: changes_frame(spark, chs, infer_columns(chs, increment_columns(spark, layout, source, t)))
                  for t, chs in by_table.items()}
        stats = land_cdc_increment(spark, layout, source, d.delta_num, frames, delta_date_us=d.watermark_us)
        rows += sum(s.upserts + s.deletes for s in stats)
        t2 = time.perf_counter()
        keys, progress = current_keys(spark, layout, source, d.delta_num)
        apply_cdc_through(spark, layout, source, d.delta_num, keys, progress=progress)
        increment_s += t2 - t1
        snapshot_s += time.perf_counter() - t2
    return {"deltas": len(deltas), "rows": rows, "seal_s": seal_s, "increment_s": increment_s,
            "snapshot_s": snapshot_s, "last_delta": deltas[-1].delta_num if deltas else None}


def decoded_changes(bootstrap: str, topic: str, ranges, decode) -> list[Change]:
    """The row changes (before-images aside) `decode` reads from the topic or its offset
    `ranges`, {partition: (start, end)}, in order; a message it cannot decode is skipped, as a
    plain script would."""
    changes: list[Change] = []
    for m in scan(bootstrap, topic, ranges):
        try:
            changes += [r for r in decode(m.key, m.value) if isinstance(r, Change) and r.operation != BEFORE_IMAGE]
        except DecodeError:
            pass
    return changes


def change_row(change: Change) -> dict:
    """A change as a plain script writes it: its values (a TIME as text) and `_op`."""
    return {**{k: (str(v) if isinstance(v, dt.time) else v) for k, v in change.values.items()}, "_op": change.operation}


def user_script(bootstrap: str, fmt: str, topic: str, out: Path, chunks: int, ranges=None, decode=None) -> dict:
    """The script a user would write: consume the topic (or its offset `ranges`, {partition:
    (start, end)}), decode, write the row changes as Parquet in `chunks` parts per table.
    `decode`: a decoder kept across calls (a Qlik decoder learns table structures from the
    metadata messages of earlier ranges, as a long-running consumer would)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    changes = decoded_changes(bootstrap, topic, ranges, decode or make_decoder(fmt))
    out.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(changes) // max(1, chunks)))
    for i in range(0, len(changes), size):
        for table, chs in changes_by_table(changes[i:i + size]).items():
            pq.write_table(pa.Table.from_pylist([change_row(c) for c in chs]), out / f"{table}-{i // size}.parquet")
    return {"rows": len(changes), "seconds": time.perf_counter() - t0}


def floor(bootstrap: str, fmt: str, topic: str, ranges=None, decode=None) -> dict:
    """Consume the topic (or its offset `ranges`) and decode, nothing written: the least any
    reader must do. `decode`: a decoder kept across calls, as `user_script`'s."""
    t0 = time.perf_counter()
    rows = len(decoded_changes(bootstrap, topic, ranges, decode or make_decoder(fmt)))
    return {"rows": rows, "seconds": time.perf_counter() - t0}


def bench_format(engine, bootstrap: str, layout: LakeLayout, work: Path, fmt: str, args, checks: list) -> dict:
    spark = engine.spark
    story = stream_story(fmt, args.seed, args.size, "json")
    topic, source = f"bench.{fmt}.{int(time.time())}", f"bench_{fmt}"
    create_topic(bootstrap, topic)
    publish(story.messages, bootstrap, {fmt: topic})
    lateness = getattr(story, "max_lateness_us", 0) / 1e6
    policy = SealPolicy(fmt, max_rows=args.max_rows, max_seconds=1e9, lateness_seconds=lateness)
    ledger = CdcLedger(work / f"{fmt}-ledger.sqlite")
    jvm = engine.server_pid
    res: dict = {"messages": len(story.messages)}
    with PeakMemory(jvm) as mem:
        res["ours"] = ours(spark, bootstrap, layout, ledger, source, fmt, topic, policy)
    with PeakMemory() as mem_user:
        res["user_script"] = user_script(bootstrap, fmt, topic, work / f"{fmt}-parquet", res["ours"]["deltas"])
    with PeakMemory() as mem_floor:
        res["floor"] = floor(bootstrap, fmt, topic)
    res["memory_mib"] = {"ours": mem.peak.to_dict(), "user_script": mem_user.peak.to_dict(),
                         "floor": mem_floor.peak.to_dict()}
    o = res["ours"]
    seal_inc = o["seal_s"] + o["increment_s"]
    res["rates"] = {
        "ours_increment": rate(o["rows"], seal_inc), "ours_with_snapshot": rate(o["rows"], seal_inc + o["snapshot_s"]),
        "user_script": rate(res["user_script"]["rows"], res["user_script"]["seconds"]),
        "floor": rate(res["floor"]["rows"], res["floor"]["seconds"]),
    }
    checks.append(_check(f"{fmt}: rows landed = rows decoded by the floor", o["rows"], res["floor"]["rows"]))
    final = final_truth(fmt, story)
    equal = all(same_rows(cdc_rows_as_of(spark, layout, source, t, o["last_delta"]), rows)
                for t, rows in final.items() if rows)
    checks.append(_check(f"{fmt}: final snapshot = the story's final state", equal, True))
    return res


def _check(what: str, got, want) -> dict:
    return {"what": what, "ok": got == want, "got": got, "want": want}


def print_report(res: dict) -> None:
    print(f"\nchange streams, {res['size']} transactions/steps per story, max_rows {res['max_rows']} per delta")
    print(f"{'format':11} {'msgs':>6} {'rows':>6} {'deltas':>6} {'seal s':>7} {'incr s':>7} {'snap s':>7} "
          f"{'ours r/s':>9} {'+snap r/s':>9} {'script r/s':>10} {'floor r/s':>9} {'vs script':>9} {'vs floor':>8}")
    for fmt, r in res["formats"].items():
        o, rt = r["ours"], r["rates"]
        print(f"{fmt:11} {r['messages']:>6} {o['rows']:>6} {o['deltas']:>6} {o['seal_s']:>7.2f} {o['increment_s']:>7.2f} "
              f"{o['snapshot_s']:>7.2f} {rt['ours_increment']:>9.0f} {rt['ours_with_snapshot']:>9.0f} "
              f"{rt['user_script']:>10.0f} {rt['floor']:>9.0f} {rt['ours_increment'] / rt['user_script']:>8.3f}x "
              f"{rt['ours_increment'] / rt['floor']:>7.3f}x")
    for fmt, r in res["formats"].items():
        m = r["memory_mib"]
        print(f"{fmt}: peak memory MiB, ours: python {m['ours']['python_mib']}, Spark JVM {m['ours']['jvm_mib']}, "
              f"workers {m['ours']['workers_mib']}; script: python {m['user_script']['python_mib']}; "
              f"floor: python {m['floor']['python_mib']}")
    for c in res["checks"]:
        print(f"check {'ok ' if c['ok'] else 'FAILED'} {c['what']}" + ("" if c["ok"] else f": {c['got']} != {c['want']}"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=400, help="transactions (qlik, dataworks) / steps (datastream)")
    ap.add_argument("--max-rows", type=int, default=400, help="sealing limit: rows per delta")
    ap.add_argument("--formats", default="qlik,dataworks,datastream")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "streams.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="deltaport-stream-bench-"))
    checks: list = []
    res = {"size": args.size, "max_rows": args.max_rows, "formats": {}, "checks": checks,
           "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work) as engine:
            layout = LakeLayout("lake")
            for fmt in [f for f in args.formats.split(",") if f]:
                print(f"{fmt} ...", flush=True)
                res["formats"][fmt] = bench_format(engine, bootstrap, layout, work, fmt, args, checks)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print_report(res)
    print(f"\nwrote {args.out}")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

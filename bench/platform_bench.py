"""Benchmark of the platform's path from Kafka to Iceberg, against the script a user would write
and against the floor. Not a test: speeds are reported as ratios to baselines run in this same
process, on this machine, never asserted. Row counts are checked (a fast wrong answer is no
answer); a mismatch fails the run after the report is written.

One process, real parts: an Apache Kafka broker (`kafka_bootstrap`: embedded, or
$KAFKA_BOOTSTRAP_SERVERS), a local[2] Spark session with an Iceberg Hadoop catalog in a temporary
warehouse, and the delta index in a temporary SQLite file. Traffic is BACKUP_TO_KAFKA of the
seed's `marketing.sales` (bench/traffic.py), 1000 rows per message, 2 streams on 2 partitions.

1. Deltas: `--warmup` deltas (default 2: the first load, all inserts, and one more; JIT and
   table creation happen there, so they are shown but left out of the medians), then K deltas
   of R rows, mostly inserts with some updates and deletes of existing keys. Per delta:
   - index:     `ingest_topic` of its messages into the delta index;
   - increment: the chosen messages from the index, the changelog fetched and landed
                (`land_changelog`), the rows read (`table_changes`) and landed (`land_increment`);
   - snapshot:  `apply_snapshots` (MERGE by primary key);
   - (a) user script: confluent-kafka consumer, fastavro record by record, Parquet per delta;
   - (b) floor: the same messages consumed and decoded to Arrow (`rows_to_arrow`), nothing written.
   rows/s of ours (index + increment, and with the snapshot) over rows/s of (a) and (b), from the
   median per-delta seconds.
2. Topic growth: deltas of R rows landed (index + increment + snapshot) alternately from the
   deltas' own topic (1x) and from a topic that other traffic made `--growth-factor` times
   bigger; alternating keeps the lake's history and the JVM's warm-up alike for both. Flat means
   reading a delta costs O(delta), not O(topic).
3. 1% delta vs rewrite: a snapshot table of N = `--bulk-factor` x R rows (written straight to
   Iceberg), then a delta of N/100 rows through the real path (Kafka, index, increment,
   `apply_snapshots`); against computing the full new state and overwriting a copy of the table.
   Done on a table created with merge-on-read (as the platform creates snapshot tables,
   resources/lake/prostore.py SNAPSHOT_TABLE_PROPERTIES) and, unless --skip-mor is given on
   one with Iceberg's default copy-on-write MERGE, for comparison,
   with what each MERGE commit rewrote. `--bulk-rounds` deltas (default 2), each applied by every
   variant and by the rewrite, in turn (rewrite first, then last), best of each.
Peak memory per phase: this process (ru_maxrss), the Spark driver JVM and its Python workers
(VmHWM), peaks reset at each phase's start (bench/peak_memory.py).

Usage:  .venv/bin/python bench/platform_bench.py [--deltas 4] [--rows 20000] [--warmup 2]
            [--growth-factor 10] [--growth-probes 3] [--bulk-factor 100]
            [--out bench-results/platform.json]  (--help for the rest)
Prints the tables and writes every number to the JSON file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import traffic  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from bench.peak_memory import PeakMemory, cpu_count, max_peak  # noqa: E402
from bench.plain_script import floor, user_script  # noqa: E402
from resources.codecs.backup import MESSAGE_TYPE_DATA, iter_changelog  # noqa: E402
from resources.prostore.delta_index import DeltaIndex  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.prostore.ingest import BACKUP, ingest_topic  # noqa: E402
from resources.kafka.admin import create_topic, delete_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.fetch import fetch_values  # noqa: E402
from resources.kafka.scan import topic_ranges  # noqa: E402
from resources.lake.prostore import (  # noqa: E402
    LakeLayout,
    data_tables,
    land_changelog,
    land_increment,
)
from resources.lake.prostore_snapshot import apply_snapshots  # noqa: E402
from resources.spark.iceberg import commit_delta, ensure_table  # noqa: E402
from resources.spark.kafka_reader import DRIVER_MAX_BYTES, table_changes, task_errors  # noqa: E402

DATAMART, BULK, FILLER = "marketing", "bulk", "filler"
PARTITIONS = STREAMS = 2
log = logging.getLogger("bench")


# ------------------------------------------------------------------------------ the platform


class Platform:
    """The real parts, wired as the assets wire them (platform_assets/prostore/assets.py)."""

    def __init__(self, spark, bootstrap: str, index: DeltaIndex, layout: LakeLayout, server_pid: int | None):
        self.spark, self.bootstrap, self.index, self.layout = spark, bootstrap, index, layout
        self.jvm = server_pid

    def publish(self, topic: str, messages) -> None:
        publish(messages, self.bootstrap, {BACKUP: topic})

    def index_new(self, topic: str) -> tuple[float, int]:
        """Index every new message of `topic` (sensor-sized calls); (seconds, messages)."""
        started, read = time.perf_counter(), 0
        while True:
            res = ingest_topic(self.bootstrap, topic, self.index, BACKUP)
            read += res.read
            if res.quarantined:
                raise RuntimeError(f"ingest quarantined messages of {topic}: {res.errors[:3]}")
            if res.remaining == 0:
                return time.perf_counter() - started, read

    def increment(self, topic: str, dm: str, n: int) -> dict:
        """changelog[N] + increment[N]: read the chosen increment, land changelog and rows."""
        t0 = time.perf_counter()
        report, refs = self.index.chosen_messages(topic, dm, n)
        if report is None or not report.complete:
            raise RuntimeError(f"{dm} delta {n}: increment not complete in {topic}: "
                               f"{report.to_dict() if report else 'nothing indexed'}")
        cl = [r for r in refs if r.table_name is None]
        values = fetch_values(self.bootstrap, topic, [(r.partition, r.offset) for r in cl])
        records = [rec for r in cl for rec in iter_changelog(values[(r.partition, r.offset)])]
        entities = land_changelog(self.spark, self.layout, dm, n, report.chosen, records)
        t1 = time.perf_counter()
        frames, value_bytes = {}, 0
        for name, entity in data_tables(entities).items():
            trefs = [r for r in refs if r.table_name == name and r.message_type == MESSAGE_TYPE_DATA]
            if trefs:
                size = sum(r.value_bytes for r in trefs)
                value_bytes += size
                frames[name] = table_changes(self.spark, self.bootstrap, topic, trefs, entity.columns,
                                             value_bytes=size)
        with task_errors():
            stats = land_increment(self.spark, self.layout, dm, n, report.delta_date, report.chosen,
                                   entities, frames, provenance={"topic": topic})
        t2 = time.perf_counter()
        return {"changelog_s": t1 - t0, "rows_s": t2 - t1, "increment_s": t2 - t0,
                "landed_rows": sum(s.rows for s in stats), "value_bytes": value_bytes,
                "read_path": "driver" if value_bytes <= DRIVER_MAX_BYTES else "executor", "refs": refs}

    def snapshot(self, dm: str, n: int) -> float:
        started = time.perf_counter()
        apply_snapshots(self.spark, self.layout, dm, n)
        return time.perf_counter() - started

    def count(self, ident: str) -> int:
        return self.spark.table(ident).count()


def ranges_of(refs) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for r in refs:
        lo, hi = out.get(r.partition, (r.offset, r.offset + 1))
        out[r.partition] = (min(lo, r.offset), max(hi, r.offset + 1))
    return out


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("inf")


# ------------------------------------------------------------------------------ 1. deltas


def bench_deltas(p: Platform, topic: str, args, work: Path, checks: list) -> tuple[list[dict], traffic.DeltaPlanner]:
    records, entity = traffic.sales_schema(DATAMART)
    changelog = traffic.changelog_value(records)
    planner = traffic.DeltaPlanner(seed=args.seed, update_share=args.update_share, delete_share=args.delete_share)
    out = []
    for n in range(args.warmup + args.deltas):
        changes = planner.delta(n, args.rows)
        chunks = traffic.encode_chunks(entity, changes.rows)
        p.publish(topic, traffic.export(DATAMART, n, changelog, traffic.TABLE, chunks,
                                        streams=STREAMS, partitions=PARTITIONS))
        with PeakMemory(p.jvm) as mem_ours:
            index_s, _ = p.index_new(topic)
            inc = p.increment(topic, DATAMART, n)
            snap_s = p.snapshot(DATAMART, n)
        refs = inc.pop("refs")
        with PeakMemory() as mem_user:
            t = time.perf_counter()
            user_rows = user_script(p.bootstrap, topic, ranges_of(refs), datamart=DATAMART, delta=n,
                                    table=traffic.TABLE, out=work / f"user-delta-{n}.parquet")
            user_s = time.perf_counter() - t
        wanted: dict[int, list[int]] = {}
        for r in refs:
            if r.message_type == MESSAGE_TYPE_DATA:
                wanted.setdefault(r.partition, []).append(r.offset)
        with PeakMemory() as mem_floor:
            t = time.perf_counter()
            floor_rows = floor(p.bootstrap, topic, wanted, entity.columns)
            floor_s = time.perf_counter() - t
        rows = len(changes.rows)
        state = p.count(p.layout.snapshot(DATAMART, traffic.TABLE))
        checks += [
            _check(f"delta {n}: increment rows", inc["landed_rows"], rows),
            _check(f"delta {n}: user script rows", user_rows, rows),
            _check(f"delta {n}: floor rows", floor_rows, rows),
            _check(f"delta {n}: snapshot rows", state, len(planner.alive)),
        ]
        rec = {"delta": n, "warmup": n < args.warmup, "rows": rows, "inserts": changes.inserts, "updates": changes.updates,
               "deletes": changes.deletes, "messages": len(refs), **inc, "index_s": index_s,
               "snapshot_s": snap_s, "user_script_s": user_s, "floor_s": floor_s, "snapshot_rows": state,
               "memory": {"ours": mem_ours.peak.to_dict(), "user_script": mem_user.peak.to_dict(),
                          "floor": mem_floor.peak.to_dict()}}
        rec["_peaks"] = (mem_ours.peak, mem_user.peak, mem_floor.peak)
        out.append(rec)
        log.info("delta %d: index %.2fs increment %.2fs snapshot %.2fs | user script %.2fs | floor %.2fs",
                 n, index_s, inc["increment_s"], snap_s, user_s, floor_s)
    return out, planner


def summarize_deltas(all_deltas: list[dict]) -> dict:
    peaks = list(zip(*(d.pop("_peaks") for d in all_deltas)))
    deltas = [d for d in all_deltas if not d["warmup"]]
    med = {k: statistics.median(d[k] for d in deltas)
           for k in ("index_s", "increment_s", "snapshot_s", "user_script_s", "floor_s")}
    rows = statistics.median(d["rows"] for d in deltas)
    land = statistics.median(d["index_s"] + d["increment_s"] for d in deltas)
    e2e = statistics.median(d["index_s"] + d["increment_s"] + d["snapshot_s"] for d in deltas)
    rps = {"ours_land": rate(rows, land), "ours_with_snapshot": rate(rows, e2e),
           "user_script": rate(rows, med["user_script_s"]), "floor": rate(rows, med["floor_s"])}
    ratios = {f"{ours}/{base}": rps[ours] / rps[base]
              for ours in ("ours_land", "ours_with_snapshot") for base in ("user_script", "floor")}
    memory = {name: max_peak(list(ps)).to_dict() for name, ps in zip(("ours", "user_script", "floor"), peaks)}
    return {"median_seconds": med | {"ours_land_s": land, "ours_with_snapshot_s": e2e}, "median_rows": rows,
            "rows_per_second": rps, "ratios": ratios, "peak_memory_mib": memory}


# ------------------------------------------------------------------------------ 2. growth


def _messages_in(p: Platform, topic: str) -> int:
    return sum(hi - lo for lo, hi in topic_ranges(p.bootstrap, topic).values())


def bench_growth(p: Platform, small: str, big: str, args, planner: traffic.DeltaPlanner, first: int,
                 checks: list) -> dict:
    """Deltas of R rows landed alternately from `small` (the deltas' own topic: 1x) and from
    `big` (filled with other traffic to `growth_factor` times as many messages): the lake's
    history and the JVM's warm-up advance alike for both, so only the topic's size differs."""
    records, entity = traffic.sales_schema(DATAMART)
    changelog = traffic.changelog_value(records)
    per_delta = -(-args.rows // traffic.CHUNK_ROWS) + 1  # data chunks + the changelog message
    small_final = _messages_in(p, small) + args.growth_probes * per_delta
    extra = args.growth_factor * small_final - args.growth_probes * per_delta
    chunks = traffic.encode_chunks(entity, [traffic.row(k) | {"sys_op": 0} for k in range(1, 20 * traffic.CHUNK_ROWS + 1)])
    filler = traffic.filler_messages(FILLER, extra, changelog, chunks, streams=STREAMS, partitions=PARTITIONS)
    t = time.perf_counter()
    p.publish(big, filler)
    publish_s = time.perf_counter() - t
    index_s, read = p.index_new(big)
    filler_info = {"messages": len(filler), "publish_s": publish_s, "index_s": index_s,
                   "index_messages_per_s": rate(read, index_s)}
    log.info("growth: %d messages of other traffic published in %.1fs, indexed in %.1fs",
             len(filler), publish_s, index_s)

    probes = []
    for k in range(2 * args.growth_probes):
        n = first + k
        size, topic = ("1x", small) if k % 2 == 0 else (f"{args.growth_factor}x", big)
        changes = planner.delta(n, args.rows)
        p.publish(topic, traffic.export(DATAMART, n, changelog, traffic.TABLE, traffic.encode_chunks(entity, changes.rows),
                                        streams=STREAMS, partitions=PARTITIONS))
        held = _messages_in(p, topic)
        idx_s, _ = p.index_new(topic)
        inc = p.increment(topic, DATAMART, n)
        snap_s = p.snapshot(DATAMART, n)
        checks.append(_check(f"growth delta {n}: increment rows", inc["landed_rows"], len(changes.rows)))
        probes.append({"topic": size, "delta": n, "topic_messages": held, "rows": len(changes.rows),
                       "index_s": idx_s, "increment_s": inc["increment_s"], "snapshot_s": snap_s,
                       "land_s": idx_s + inc["increment_s"]})
        log.info("growth %s (topic %d messages) delta %d: index %.2fs increment %.2fs snapshot %.2fs",
                 size, held, n, idx_s, inc["increment_s"], snap_s)
    one = [x for x in probes if x["topic"] == "1x"]
    many = [x for x in probes if x["topic"] != "1x"]
    best = {k: (min(x[k] for x in one), min(x[k] for x in many)) for k in ("land_s", "snapshot_s")}
    return {"probes": probes, "filler": filler_info,
            "topic_messages": (one[-1]["topic_messages"], many[-1]["topic_messages"]),
            "best_seconds": best, "ratio_big_over_small": {k: b / s for k, (s, b) in best.items()}}


# ------------------------------------------------------------------------------ 3. 1% delta vs rewrite

MERGE_ON_READ = {"write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.delete.mode": "merge-on-read"}
SUMMARY_KEYS = ("added-data-files", "deleted-data-files", "added-delete-files", "added-records",
                "deleted-records", "added-position-deletes", "total-data-files", "total-records")


def _last_commit(spark, ident: str) -> dict:
    """What the table's newest snapshot did (data files and records added and removed)."""
    row = spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
    summary = dict(row["summary"]) if row else {}
    return {k: int(summary[k]) for k in SUMMARY_KEYS if k in summary}


def bench_bulk(p: Platform, topic: str, args, checks: list) -> dict:
    """A table of N rows and a delta of N/100 rows, applied by `apply_snapshots` to a table created
    with merge-on-read (as the platform creates snapshot tables) and, unless --skip-mor, to one with
    Iceberg's default copy-on-write MERGE; against rewriting a copy of the table with the new state."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    from resources.codecs.types import spark_type

    spark, layout = p.spark, p.layout
    n_rows = args.bulk_factor * args.rows
    delta_rows = max(1, n_rows // 100)
    _, entity = traffic.sales_schema(BULK)
    cols = [c.name for c in entity.columns]
    struct = StructType([StructField(c.name, spark_type(c), True) for c in entity.columns])
    copy = f"{layout.catalog}.{BULK}_rewrite.{traffic.TABLE}"
    i = F.col("id")
    descriptions = F.when(i % 3 == 0, F.lit(traffic.DESCRIPTIONS[0])).when(i % 3 == 1, F.lit(traffic.DESCRIPTIONS[1]))
    # The values `traffic.row(key)` gives, generated by Spark: no need to send N rows through Kafka.
    base = spark.range(1, n_rows + 1).select(
        i.alias("id"),
        F.timestamp_micros(F.lit(traffic.BASE_TS_US) + i * F.lit(1_000_003)).cast("timestamp_ntz").alias("transaction_date"),
        F.concat(F.lit("ABC"), (F.lit(102_101) + i % 5000).cast("string")).alias("product_code"),
        (F.lit(1) + i % 7).alias("product_units"),
        (F.lit(1_000_000_000) + i % 12_345).alias("store_id"),
        descriptions.alias("description"),
    ).select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in struct.fields])

    variants = [{"mode": "merge-on-read (platform default)", "datamart": f"{BULK}_mor", "properties": MERGE_ON_READ}]
    if not args.skip_mor:
        variants.append({"mode": "copy-on-write (Iceberg default)", "datamart": BULK, "properties": None})
    write_base_s = None
    for v in variants:
        dm = v["datamart"]
        v["records"], _ = traffic.sales_schema(dm)
        # Delta 0: the N-row state written straight to Iceberg and recorded as delta 0 (so
        # apply_snapshots starts after it); its changelog and manifest landed by the project.
        entities = land_changelog(spark, layout, dm, 0, "bench-base", v["records"])
        land_increment(spark, layout, dm, 0, traffic.delta_date_us(0), "bench-base", entities, {})
        v["table"] = snap = layout.snapshot(dm, traffic.TABLE)
        ensure_table(spark, snap, struct, properties=v["properties"])
        t = time.perf_counter()
        commit_delta(spark, snap, base, delta_num=0, mode="overwrite")
        if write_base_s is None:
            write_base_s = time.perf_counter() - t
            ensure_table(spark, copy, struct)
            commit_delta(spark, copy, spark.table(snap), delta_num=0, mode="overwrite")
        v["data_files_before"] = spark.table(f"{snap}.files").count()
        # The same changes for every variant (same seed), sent as the variant's datamart.
        v["planner"] = traffic.DeltaPlanner(seed=args.seed + 1, initial=n_rows, update_share=args.update_share,
                                            delete_share=args.delete_share)
        v["rounds"] = []
    log.info("bulk: %d rows written in %.1fs", n_rows, write_base_s)

    def rewrite(n: int) -> float:
        """The alternative: the whole new state computed from the old one and delta n's changes,
        then the table overwritten with it (what one does without MERGE)."""
        t = time.perf_counter()
        delta = (spark.table(layout.increment(BULK, traffic.TABLE)).where(F.col("delta_num") == n)
                 .select(*cols, "sys_op").localCheckpoint(eager=True))
        new_state = (spark.table(copy).join(delta.select("id"), "id", "left_anti").select(*cols)
                     .unionByName(delta.where(F.col("sys_op") != 1).select(*cols)))
        new_state.writeTo(copy).overwrite(F.lit(True))
        return time.perf_counter() - t

    rewrites = []
    for r in range(args.bulk_rounds):
        n = r + 1
        for v in variants:  # land delta n's increment in every variant
            changes = v["planner"].delta(n, delta_rows)
            p.publish(topic, traffic.export(v["datamart"], n, traffic.changelog_value(v["records"]), traffic.TABLE,
                                            traffic.encode_chunks(entity, changes.rows),
                                            streams=STREAMS, partitions=PARTITIONS))
            index_s, _ = p.index_new(topic)
            inc = p.increment(topic, v["datamart"], n)
            checks.append(_check(f"bulk {v['mode']} delta {n}: increment rows", inc["landed_rows"], delta_rows))
            v["rounds"].append({"delta": n, "inserts": changes.inserts, "updates": changes.updates,
                                "deletes": changes.deletes, "index_s": index_s, "increment_s": inc["increment_s"],
                                "read_path": inc["read_path"]})
        # Apply it: rewrite first in even rounds, last in odd ones, so warm-up favours neither.
        steps = [None, *variants] if r % 2 == 0 else [*variants[::-1], None]
        for v in steps:
            with PeakMemory(p.jvm) as mem:
                if v is None:
                    seconds = rewrite(n)
                else:
                    seconds = p.snapshot(v["datamart"], n)
            commit = _last_commit(spark, copy if v is None else v["table"])
            if v is None:
                rewrites.append({"delta": n, "seconds": seconds, "commit": commit, "peak_memory_mib": mem.peak.to_dict()})
            else:
                v["rounds"][-1] |= {"merge_s": seconds, "merge_commit": commit, "peak_memory_mib": mem.peak.to_dict()}
            log.info("bulk delta %d: %s %.1fs (%s)", n, "rewrite" if v is None else f"MERGE, {v['mode']}", seconds, commit)

    def digest(ident: str):
        return tuple(spark.table(ident).select(
            F.count(F.lit(1)), F.sum((F.xxhash64(*cols) % F.lit(1_000_000_007)).cast("long"))).first())

    want = digest(copy)
    best_rewrite = min(x["seconds"] for x in rewrites)
    out = {"table_rows": n_rows, "delta_rows": delta_rows, "write_base_s": write_base_s,
           "rewrite": {"rounds": rewrites, "best_s": best_rewrite}, "variants": []}
    for v in variants:
        got = digest(v["table"])
        checks += [_check(f"bulk {v['mode']}: snapshot rows", got[0], len(v["planner"].alive)),
                   _check(f"bulk {v['mode']}: MERGE result equals the rewrite (rows, hash sum)", got, want)]
        best_merge = min(x["merge_s"] for x in v["rounds"])
        best_land = min(x["index_s"] + x["increment_s"] for x in v["rounds"])
        out["variants"].append({
            "mode": v["mode"], "datamart": v["datamart"], "table": v["table"],
            "data_files_before": v["data_files_before"], "rounds": v["rounds"],
            "best_land_s": best_land, "best_merge_s": best_merge,
            "merge_over_rewrite": best_merge / best_rewrite,
            "delta_total_over_rewrite": (best_land + best_merge) / best_rewrite})
    return out


# ------------------------------------------------------------------------------ report


def _check(what: str, got, want) -> dict:
    ok = got == want
    if not ok:
        log.error("CHECK FAILED: %s: got %r, expected %r", what, got, want)
    return {"check": what, "ok": ok, "got": got, "expected": want}


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def print_report(res: dict) -> None:
    cfg, deltas, s = res["config"], res["deltas"], res["summary"]
    print(f"\ndeltaport platform benchmark: {cfg['warmup']} + {cfg['deltas']} deltas x {cfg['rows']:,} rows of {DATAMART}.sales, "
          f"{cfg['chunk_rows']} rows/message, {res['machine']['cpus']} cpus, Spark {cfg['master']}")
    print("\n1. Per delta (seconds; rows/s of ours = index + increment [+ snapshot]; w = warm-up, "
          "not in the medians)")
    head = (f"{'delta':>5} {'rows':>8} {'path':>8} {'index':>7} {'increm.':>8} {'snapsh.':>8} "
            f"{'ours r/s':>10} {'+snap r/s':>10} {'user s':>7} {'user r/s':>10} {'floor s':>8} {'floor r/s':>10}")
    print(head)
    print("-" * len(head))
    for d in deltas:
        land = d["index_s"] + d["increment_s"]
        print(f"{str(d['delta']) + ('w' if d['warmup'] else ''):>5} {d['rows']:>8,} {d['read_path']:>8} {d['index_s']:>7.2f} {d['increment_s']:>8.2f} "
              f"{d['snapshot_s']:>8.2f} {_fmt_rate(rate(d['rows'], land)):>10} "
              f"{_fmt_rate(rate(d['rows'], land + d['snapshot_s'])):>10} {d['user_script_s']:>7.2f} "
              f"{_fmt_rate(rate(d['rows'], d['user_script_s'])):>10} {d['floor_s']:>8.3f} "
              f"{_fmt_rate(rate(d['rows'], d['floor_s'])):>10}")
    m, r, q = s["median_seconds"], s["rows_per_second"], s["ratios"]
    print(f"{'med.':>5} {s['median_rows']:>8,.0f} {'':>8} {m['index_s']:>7.2f} {m['increment_s']:>8.2f} "
          f"{m['snapshot_s']:>8.2f} {_fmt_rate(r['ours_land']):>10} {_fmt_rate(r['ours_with_snapshot']):>10} "
          f"{m['user_script_s']:>7.2f} {_fmt_rate(r['user_script']):>10} {m['floor_s']:>8.3f} {_fmt_rate(r['floor']):>10}")
    print("\n   our rows/s as a ratio (median deltas; >1 = ours faster)")
    print(f"   {'':<34}{'vs (a) user script':>20}{'vs (b) floor':>15}")
    for ours, label in (("ours_land", "ours: index + increment"), ("ours_with_snapshot", "ours: index + increment + snapshot")):
        print(f"   {label:<34}{q[f'{ours}/user_script']:>19.2f}x{q[f'{ours}/floor']:>14.3f}x")
    print("\n   peak memory per phase (MiB; max over deltas)")
    print(f"   {'phase':<14}{'python':>9}{'spark jvm':>11}{'py workers':>12}{'total':>9}")
    for name, mem in s["peak_memory_mib"].items():
        jvm = "-" if mem["jvm_mib"] is None else f"{mem['jvm_mib']:.0f}"
        wk = "-" if mem["workers_mib"] is None else f"{mem['workers_mib']:.0f}"
        print(f"   {name:<14}{mem['python_mib']:>9.0f}{jvm:>11}{wk:>12}{mem['total_mib']:>9.0f}")

    g = res["growth"]
    print(f"\n2. One delta of {cfg['rows']:,} rows from a topic of 1x vs {cfg['growth_factor']}x the data "
          f"({g['topic_messages'][0]:,} vs {g['topic_messages'][1]:,} messages), alternately")
    print(f"   {'topic':>6} {'delta':>6} {'messages':>9} {'index':>7} {'increm.':>8} {'snapsh.':>8}")
    for x in g["probes"]:
        print(f"   {x['topic']:>6} {x['delta']:>6} {x['topic_messages']:>9,} {x['index_s']:>7.2f} "
              f"{x['increment_s']:>8.2f} {x['snapshot_s']:>8.2f}")
    gr = g["ratio_big_over_small"]
    print(f"   {cfg['growth_factor']}x / 1x (best of each): index + increment {gr['land_s']:.2f}x, "
          f"snapshot {gr['snapshot_s']:.2f}x  (1.00 = flat)")

    b = res["bulk"]
    r0 = b["variants"][0]["rounds"][0]
    print(f"\n3. A 1% delta ({b['delta_rows']:,} rows: {r0['inserts']:,} inserts, {r0['updates']:,} updates, "
          f"{r0['deletes']:,} deletes) on a table of {b['table_rows']:,} rows, vs rewriting the table; "
          f"{len(b['rewrite']['rounds'])} rounds, best of each")
    rw = b["rewrite"]
    print(f"   writing the {b['table_rows']:,}-row table once: {b['write_base_s']:.2f} s; rewriting it with "
          f"the new state: " + " / ".join(f"{x['seconds']:.2f}" for x in rw["rounds"]) + " s")
    print(f"   {'snapshot table':<34}{'index+inc. s':>13}{'MERGE s':>14}{'MERGE/rewrite':>15}"
          f"{'delta/rewrite':>15}  last MERGE rewrote files (rows) / added delete files")
    for v in b["variants"]:
        c = v["rounds"][-1]["merge_commit"]
        merges = " / ".join(f"{x['merge_s']:.2f}" for x in v["rounds"])
        print(f"   {v['mode']:<34}{v['best_land_s']:>13.2f}{merges:>14}{v['merge_over_rewrite']:>14.2f}x"
              f"{v['delta_total_over_rewrite']:>14.2f}x  {c.get('deleted-data-files', 0)} of "
              f"{c.get('total-data-files', 0) - c.get('added-data-files', 0) + c.get('deleted-data-files', 0)} "
              f"({c.get('deleted-records', 0):,} rows) / {c.get('added-delete-files', 0)}")
    print("   (<1 = applying the delta is cheaper than rewriting; delta = index + increment + MERGE)")
    mems = [(v["mode"], x["peak_memory_mib"]) for v in b["variants"] for x in v["rounds"][-1:]]
    mems.append(("rewrite", rw["rounds"][-1]["peak_memory_mib"]))
    for name, mem in mems:
        print(f"   peak memory, {name:<32} python {mem['python_mib']:.0f} + jvm {mem['jvm_mib'] or 0:.0f} "
              f"+ workers {mem['workers_mib'] or 0:.0f} = {mem['total_mib']:.0f} MiB")

    bad = [c for c in res["checks"] if not c["ok"]]
    print(f"\nchecks: {len(res['checks']) - len(bad)}/{len(res['checks'])} passed"
          + ("" if not bad else "; FAILED: " + "; ".join(c["check"] for c in bad)))
    load = res["machine"]["load_average_1_5_15"]
    busiest = max(load["start"][1], load["end"][1])
    if busiest > res["machine"]["cpus"]:
        print(f"note: the machine was busy (5-min load average up to {busiest:.1f} on {res['machine']['cpus']} cpus): "
              "seconds are inflated and noisy; ratios of interleaved runs less so")
    print(f"total {res['total_seconds']:.0f} s; results in {res['out']}")


# ------------------------------------------------------------------------------ main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltas", type=int, default=4, help="K deltas (default 4)")
    ap.add_argument("--rows", type=int, default=20_000, help="R rows per delta (default 20000)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="deltas run first and left out of the medians: JIT, first table creations (default 2)")
    ap.add_argument("--growth-factor", type=int, default=10, help="topic growth for the flatness test (default 10)")
    ap.add_argument("--growth-probes", type=int, default=3,
                    help="deltas timed at each topic size, alternating (default 3)")
    ap.add_argument("--bulk-rounds", type=int, default=2,
                    help="1%% deltas applied in turn by each variant and by the rewrite (default 2)")
    ap.add_argument("--skip-mor", action="store_true",
                    help="leave out the copy-on-write comparison of the 1%% delta test")
    ap.add_argument("--bulk-factor", type=int, default=100,
                    help="snapshot table of bulk-factor x R rows for the 1%% delta test (default 100)")
    ap.add_argument("--update-share", type=float, default=0.15, help="share of updates per delta (default 0.15)")
    ap.add_argument("--delete-share", type=float, default=0.05, help="share of deletes per delta (default 0.05)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("bench-results/platform.json"))
    ap.add_argument("--keep", action="store_true", help="keep the work folder (lake, index, Parquet)")
    args = ap.parse_args(argv)
    if args.warmup < 0 or args.deltas < 1 or args.rows < 1 or args.growth_factor < 1 or args.growth_probes < 1 or args.bulk_factor < 1 \
            or args.bulk_rounds < 1:
        ap.error("--deltas, --rows and the growth and bulk numbers must be >= 1 (--warmup >= 0)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.perf_counter()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="deltaport-bench-"))
    checks: list[dict] = []
    tag = f"{os.getpid()}.{int(time.time())}"
    topic, big_topic, bulk_topic = f"bench.backup.{tag}", f"bench.backup-big.{tag}", f"bench.bulk.{tag}"
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work, master=args.master) as engine:
            for t in (topic, big_topic, bulk_topic):
                create_topic(bootstrap, t, partitions=PARTITIONS)
            spark_start_s = engine.start_seconds
            p = Platform(engine.spark, bootstrap, DeltaIndex(work / "index.sqlite"), LakeLayout("lake"), engine.server_pid)
            try:
                deltas, planner = bench_deltas(p, topic, args, work, checks)
                summary = summarize_deltas(deltas)
                growth = bench_growth(p, topic, big_topic, args, planner, args.warmup + args.deltas, checks)
                bulk = bench_bulk(p, bulk_topic, args, checks)
            finally:
                if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():  # leave an external broker clean
                    for t in (topic, big_topic, bulk_topic):
                        delete_topic(bootstrap, t)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    import pyspark

    res = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "chunk_rows": traffic.CHUNK_ROWS, "partitions": PARTITIONS, "streams": STREAMS,
                   "driver_max_bytes": DRIVER_MAX_BYTES},
        "machine": {"cpus": cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
                    "platform": platform.platform(), "spark_start_s": spark_start_s,
                    "broker": os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "embedded",
                    # Other work on the machine skews seconds (ratios less so: baselines interleave).
                    "load_average_1_5_15": {"start": load_before, "end": os.getloadavg()}},
        "deltas": deltas, "summary": summary, "growth": growth, "bulk": bulk, "checks": checks,
        "total_seconds": time.perf_counter() - started, "out": str(args.out),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print_report(res)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

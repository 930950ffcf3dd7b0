"""What a start of the embedded Spark server costs, with its class archive (resources/class_archive.py)
and without (`-Xshare:off`, the baseline), in turns in one process; then the same for the
embedded Kafka broker (`--broker-runs`: formatted, started until it answers, stopped).

Each start: a new state folder, the server started (`bench_engine`, deltaport's settings), then
its first Iceberg work (a table created, two rows inserted, a MERGE, a count), then the server
stopped. Reported per side: seconds until the server listens, seconds of that first work, and the
server's CPU seconds for both (the JVM and its children). The first start with an archive of a
new identity makes the archive (at its stop) and is left out of the figures.

    python bench/server_start_bench.py [--runs 3]

Results: bench-results/server_start.json and lines on stdout (medians and ratios, shared / off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu_time import server_cpu_seconds  # noqa: E402
from bench.engine import bench_engine  # noqa: E402

OFF = {"spark.driver.extraJavaOptions": "-Xshare:off"}


def one_start(conf: dict[str, str]) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="deltaport-start-bench-"))
    began = time.perf_counter()
    with bench_engine(work, conf=conf) as engine:
        up_s, up_cpu = time.perf_counter() - began, server_cpu_seconds(engine.server_pid)
        t = time.perf_counter()
        spark = engine.spark
        spark.sql("CREATE TABLE lake.bench.t (id bigint, v string) USING iceberg")
        spark.sql("INSERT INTO lake.bench.t VALUES (1, 'a'), (2, 'b')")
        spark.sql("MERGE INTO lake.bench.t t USING (SELECT 2L AS id, 'c' AS v) s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        rows = spark.sql("SELECT count(*) AS n FROM lake.bench.t").collect()[0]["n"]
        work_s, cpu = time.perf_counter() - t, server_cpu_seconds(engine.server_pid)
    assert rows == 2, rows
    return {"up_s": round(up_s, 2), "first_work_s": round(work_s, 2), "up_cpu_s": round(up_cpu, 1),
            "cpu_s": round(cpu, 1)}


def one_broker_start(options: tuple[str, ...]) -> dict[str, float]:
    """An embedded Kafka broker formatted, started until it answers, and stopped: its seconds to
    answering and the CPU seconds of its two JVMs (the storage tool's and the broker's)."""
    import resource

    from resources.kafka.broker import EmbeddedKafka

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    kafka = EmbeddedKafka(jvm_options=options).start()
    up_s = kafka.start_seconds
    kafka.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"up_s": round(up_s, 2), "cpu_s": round(cpu, 2)}


def broker_starts(runs: int) -> dict:
    from resources.kafka.broker import EmbeddedKafka

    shared, off = EmbeddedKafka.DEFAULT_JVM_OPTIONS, (*EmbeddedKafka.DEFAULT_JVM_OPTIONS, "-Xshare:off")
    one_broker_start(shared)  # makes the archives when there are none
    sides: dict[str, list[dict]] = {"shared": [], "off": []}
    for _ in range(runs):
        for side, options in (("shared", shared), ("off", off)):
            sides[side].append(one_broker_start(options))
    median = {side: {k: statistics.median(r[k] for r in rows) for k in ("up_s", "cpu_s")} for side, rows in sides.items()}
    print(f"embedded Kafka broker start, medians of {runs}: answering after {median['shared']['up_s']} s with its "
          f"class archives, {median['off']['up_s']} s without; CPU {median['shared']['cpu_s']} / "
          f"{median['off']['cpu_s']} s ({median['shared']['cpu_s'] / median['off']['cpu_s']:.3f}x)", flush=True)
    return {"sides": sides, "median": median}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="starts per side, in turns")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "server_start.json")
    ap.add_argument("--broker-runs", type=int, default=3, help="embedded Kafka broker starts per side (0: none)")
    args = ap.parse_args(argv)
    warm = one_start({})  # makes the archive if this identity has none yet (or maps it)
    print(f"first start with sharing (makes the archive when there is none): {warm}", flush=True)
    sides: dict[str, list[dict]] = {"shared": [], "off": []}
    for run in range(args.runs):
        for side, conf in (("shared", {}), ("off", OFF)):
            sides[side].append(one_start(conf))
            print(f"run {run + 1}, {side}: {sides[side][-1]}", flush=True)
    res = {"runs": args.runs, "first": warm, "sides": sides, "median": {}, "ratio": {}}
    for key in ("up_s", "first_work_s", "up_cpu_s", "cpu_s"):
        for side in sides:
            res["median"].setdefault(side, {})[key] = statistics.median(r[key] for r in sides[side])
        res["ratio"][key] = round(res["median"]["shared"][key] / res["median"]["off"][key], 3)
    if args.broker_runs:
        res["broker"] = broker_starts(args.broker_runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    shared, off = res["median"]["shared"], res["median"]["off"]
    print(f"embedded server start, medians of {args.runs}: listening after {shared['up_s']} s with the class archive, "
          f"{off['up_s']} s without ({res['ratio']['up_s']}x); first Iceberg work {shared['first_work_s']} / "
          f"{off['first_work_s']} s ({res['ratio']['first_work_s']}x); server CPU to listening {shared['up_cpu_s']} / "
          f"{off['up_cpu_s']} s, in all {shared['cpu_s']} / {off['cpu_s']} s ({res['ratio']['cpu_s']}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`deltaport demo`: the whole path on embedded defaults, in one command. Starts a real Kafka
broker (or uses $KAFKA_BOOTSTRAP_SERVERS), writes emulated Prostore traffic with every fault
switched on, and inspects both topics as `deltaport inspect` would. The lake side of the
platform joins this command as it lands."""

from __future__ import annotations

import argparse
import time

from platform_assets.cli import emulate_cmd, inspect_cmd
from resources.kafka.broker import kafka_bootstrap


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the platform end to end on embedded defaults", description=__doc__)
    p.add_argument("--deltas", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.set_defaults(run=run)


def run(args) -> int:
    started = time.monotonic()
    print("starting the embedded Kafka broker (first run downloads its jars from Maven Central) ...", flush=True)
    with kafka_bootstrap() as bootstrap:
        print(f"broker at {bootstrap} after {time.monotonic() - started:.1f} s", flush=True)
        suffix = f"demo.{int(time.time())}"
        signal_topic, backup_topic = f"prostore.signal.{suffix}", f"prostore.backup.{suffix}"
        sub = argparse.ArgumentParser().add_subparsers()
        emulate_cmd.register(sub)
        inspect_cmd.register(sub)
        emulate = sub.choices["emulate"].parse_args([
            "-b", bootstrap, "--signal-topic", signal_topic, "--backup-topic", backup_topic,
            "--deltas", str(args.deltas), "--seed", str(args.seed), "--streams", "2", "--partitions", "3",
            "--chunk-size", "5", "--faults", "all",
        ])
        print(f"\n$ deltaport emulate --deltas {args.deltas} --streams 2 --partitions 3 --chunk-size 5 --faults all", flush=True)
        emulate.run(emulate)
        for topic in (backup_topic, signal_topic):
            print(f"\n$ deltaport inspect --topic {topic}", flush=True)
            inspect = sub.choices["inspect"].parse_args(["-b", bootstrap, "--topic", topic])
            inspect.run(inspect)
    print(f"\ndemo done in {time.monotonic() - started:.1f} s", flush=True)
    return 0

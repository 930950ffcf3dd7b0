"""`deltaport inspect --topic T`: what RESTORE_FROM_KAFKA's read-only check answers, for a backup
topic (datamarts, deltas present, complete or not and why, deltas missing) and for a signal
topic (deltas opened, closed, cancelled). `--format qlik|dataworks|datastream|debezium|...`: a
change stream's topic instead (per table its upserts and deletes, transactions, heartbeats,
schema changes, tombstones), read by the format's own decoder as the sealer reads it
(resources/changestream/inspect.py). Bad messages are listed with topic, partition and offset.
Nothing is written and no offset committed. Exit status 0 whenever the topic could be read,
whatever was found in it."""

from __future__ import annotations

import json
import time

from platform_assets.cli.common import Progress, add_bootstrap_option, resolve_bootstrap
from resources.formats import STREAM_FORMATS
from resources.prostore.inspect import InspectReport, TopicInspector
from resources.prostore.ranges import render as render_ranges
from resources.kafka.scan import scan, topic_ranges


def register(sub) -> None:
    p = sub.add_parser("inspect", help="report what a Prostore or change-stream topic holds", description=__doc__)
    add_bootstrap_option(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--format", choices=["prostore", *STREAM_FORMATS], default="prostore",
                   help="the topic's format: prostore (a backup or signal topic, the default) or a change stream's")
    p.add_argument("--datamart", default=None, help="report only this datamart")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--keys-only", action="store_true", help="do not read values (faster; finds no value errors)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker")
    p.set_defaults(run=run)


def run(args) -> int:
    bootstrap = resolve_bootstrap(args)
    ranges = topic_ranges(bootstrap, args.topic, timeout=args.timeout)
    if args.format == "prostore":
        inspector = TopicInspector(args.topic, check_values=not args.keys_only)
    else:
        from resources.changestream.inspect import StreamInspector

        inspector = StreamInspector(args.topic, args.format)
    bar = Progress(f"scanning {args.topic}")
    began = time.monotonic()
    try:
        for msg in scan(bootstrap, args.topic, ranges, timeout=args.timeout, on_progress=bar):
            inspector.add(msg)
    finally:
        bar.close()
    report, seconds = inspector.report(), time.monotonic() - began
    if args.json:
        doc = report.to_dict()
        doc["partitions"] = {str(p): list(r) for p, r in ranges.items()}
        doc["seconds"] = round(seconds, 3)
        if args.datamart and args.format == "prostore":
            doc["backup"]["datamarts"] = [d for d in doc["backup"]["datamarts"] if d["datamart"] == args.datamart]
            doc["signal"] = {k: v for k, v in doc["signal"].items() if k == args.datamart}
        print(json.dumps(doc, ensure_ascii=False, indent=1))
    elif args.format == "prostore":
        print(render(report, ranges, seconds, args.datamart))
    else:
        from resources.changestream.inspect import render as render_stream

        print(render_stream(report, len(ranges), seconds))
    return 0


def _span(deltas: list[int]) -> str:
    return f"{deltas[0]}..{deltas[-1]}" if deltas else "none"


def render(report: InspectReport, ranges: dict, seconds: float, only: str | None = None) -> str:
    lines = [f"topic {report.topic}: {report.messages} messages in {len(ranges)} partition(s), read in {seconds:.1f} s"]
    for name, dm in sorted(report.backup.datamarts.items()):
        if only and name != only:
            continue
        present = dm.present
        lines.append(f"backup of datamart {name}: deltas {_span(present)}, {len(present)} present, "
                     f"{len(dm.complete)} complete, {len(dm.incomplete)} incomplete, "
                     f"missing: {render_ranges(dm.missing_deltas) or 'none'}")
        for n, delta in sorted(dm.deltas.items()):
            rows = {t: c for (d, k, t), c in report.rows.items() if d == name and k == n}
            detail = ", ".join(f"{t} {c}" for t, c in sorted(rows.items()))
            status = "complete" if delta.complete else "INCOMPLETE"
            lines.append(f"  delta {n}: {status}" + (f"; rows: {detail}" if detail else ""))
            for inc in delta.increments:
                mark = "chosen" if inc.increment_id == delta.chosen else ("complete" if inc.complete else "incomplete")
                why = "; ".join(inc.reasons)
                extra = f", {inc.duplicates} duplicate(s)" if inc.duplicates else ""
                lines.append(f"    increment {inc.increment_id}: {mark}, {inc.messages} message(s){extra}"
                             + (f": {why}" if why else ""))
    for name, sig in sorted(report.signal.items()):
        if only and name != only:
            continue
        closed = sorted(sig.closed)
        lines.append(f"signal of datamart {name}: deltas closed {_span(closed)} ({len(closed)}), "
                     f"cancelled {sorted(sig.cancelled) or 'none'}, open {sorted(sig.opened - set(closed) - sig.cancelled) or 'none'}, "
                     f"writes ok {sig.writes_ok}, cancelled {sig.writes_cancelled}, schema changes {sig.schema_changes}"
                     + (f", unknown events {dict(sig.unknown_events)}" if sig.unknown_events else ""))
    if report.duplicates:
        lines.append("duplicated messages: " + ", ".join(f"{k} {v}" for k, v in sorted(report.duplicates.items())))
    total = sum(report.errors_by_kind.values())
    lines.append(f"bad messages: {total}" + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(report.errors_by_kind.items())) + ")" if total else ""))
    lines += [f"  {err}" for err in report.errors]
    return "\n".join(lines)

"""`deltaport status`: how far behind its sources the lake is, one line per source: the deltas
ready at the source and not landed, and the seconds since the oldest of them (platform_assets/lag.py).
It reads what the sources say now: the state store's view, plus what the topics hold past the
store's progress, which no sensor tick or `sync` has read yet (DELTA_CLOSE events on a signal
topic, deltas in a backup-only topic, a change stream's unread messages: read-only, at most 5,000
messages a topic, platform_assets/lag_live.py). A source whose topics cannot be reached (within
10 s) is reported from the store alone, with the time of the last read of its topics.
Exit codes: 0 when every source is within the bound; 1 when one is further behind than the bound
(`--max-lag-seconds`, default `sensor.max_lag_seconds` of the config), marked LATE; 3 when none is
but a source's topics could not be read (its lag is not known now); 2 for a bad config or usage.
The check lag_within_bound in the UI computes the same numbers when executed."""

from __future__ import annotations

from platform_assets.cli.common import add_config_option, on_instance

UNKNOWN = 3  # the exit code when a source's lag cannot be known now


def register(sub) -> None:
    p = sub.add_parser("status", help="lag per source: deltas and seconds behind", description=__doc__)
    add_config_option(p)
    p.add_argument("--max-lag-seconds", type=float, default=None, metavar="S",
                   help="exit 1 when a source is more than S seconds behind (default: sensor.max_lag_seconds)")
    p.set_defaults(run=run)


def run(args) -> int:
    lines, code = on_instance(args, lambda cfg, instance: report(cfg, instance, max_lag_seconds=args.max_lag_seconds))
    print("\n".join(lines))
    return code


def report(cfg, instance, *, max_lag_seconds: float | None = None, timeout: float | None = None) -> tuple[list[str], int]:
    """(a line per source, the exit code); `timeout`: per Kafka call (default lag_live's)."""
    from platform_assets.definitions import index_resource, kafka_resource, ledger_resource
    from platform_assets.lag_live import STATUS_TIMEOUT_SECONDS, live_lag

    from resources.state.delta_marks import DeltaMarks

    kafka, wait = kafka_resource(cfg), timeout or STATUS_TIMEOUT_SECONDS
    marks = DeltaMarks(index_resource(cfg).store())
    lags = [live_lag(dm, kind="prostore", instance=instance, kafka=kafka, index=index_resource(cfg).get(), timeout=wait,
                     marks=marks) for dm in cfg.datamarts]
    lags += [live_lag(s, kind="stream", instance=instance, kafka=kafka, ledger=ledger_resource(cfg).get(), timeout=wait,
                      marks=marks) for s in cfg.streams]
    bound = cfg.sensor.max_lag_seconds if max_lag_seconds is None else max_lag_seconds
    lines = [f"{lag.text()}{f'  LATE (bound {bound:.0f} s)' if lag.seconds > bound else ''}"
             f"{_held_for_retry(instance, lag.source, cfg.sensor.retry_after_seconds)}" for lag in lags]
    if any(lag.seconds > bound for lag in lags):
        return lines, 1
    return lines, UNKNOWN if any(lag.stale for lag in lags) else 0


def _held_for_retry(instance, source: str, retry_after: float) -> str:
    """What holds the source's later deltas when its newest run failed and awaits the retry
    Dagster said it would launch (platform_assets/prostore/sensors.py `awaited_retry`); else ''."""
    from platform_assets.deltas.requests import source_awaited_retry

    awaited = source_awaited_retry(instance, source)
    if awaited is None:
        return ""
    run, waited = awaited
    then = "its deltas are requested again by the next tick" if waited >= retry_after else \
        f"the sensor requests its deltas again {retry_after - waited:.0f} s from now if Dagster has not"
    return f"  HELD: run {run.run_id[:8]} failed {waited:.0f} s ago and awaits Dagster's retry ({then})"

"""`deltaport status`: how far behind its sources the lake is, one line per source: the deltas
ready at the source and not landed, and the seconds since the oldest of them
(platform_assets/lag.py), as the state store knows them after the last sensor tick or `sync`.
Exit 0 when every source is within `sensor.max_lag_seconds`, 1 when one is past it (for cron
alerting), as the check lag_within_bound says in the UI."""

from __future__ import annotations

from platform_assets.cli.common import add_config_option, on_instance


def register(sub) -> None:
    p = sub.add_parser("status", help="lag per source: deltas and seconds behind", description=__doc__)
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    lines, code = on_instance(args, report)
    print("\n".join(lines))
    return code


def report(cfg, instance) -> tuple[list[str], int]:
    """(a line per source, the exit code)."""
    from platform_assets.definitions import index_resource, ledger_resource
    from platform_assets.lag import landed_through, prostore_lag, stream_lag, utc_now

    lags = [prostore_lag(dm, index_resource(cfg).get(), landed_through(instance, dm.name), utc_now())
            for dm in cfg.datamarts]
    lags += [stream_lag(s, ledger_resource(cfg).get(), landed_through(instance, s.name), utc_now())
             for s in cfg.streams]
    bound = cfg.sensor.max_lag_seconds
    lines = [f"{lag.text()}{f'  LATE (bound {bound:.0f} s)' if lag.seconds > bound else ''}" for lag in lags]
    return lines, 1 if any(lag.seconds > bound for lag in lags) else 0

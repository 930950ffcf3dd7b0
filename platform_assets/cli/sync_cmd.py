"""`deltaport sync`: one headless pass, for cron and CI. Evaluates each datamart's DELTA_CLOSE
sensor once (and again while it has work), materializes the due deltas in order on the Dagster
instance of $DAGSTER_HOME (default ./.dagster), prints a line per run naming the tables it
changed (and a count of the others), and exits 0 when every run succeeded, 1 when a run failed
or a source could not be read. `--source NAME` (repeatable): those sources only."""

from __future__ import annotations

from platform_assets.cli.common import add_config_option, on_instance


def register(sub) -> None:
    p = sub.add_parser("sync", help="land every due delta once, headless", description=__doc__)
    add_config_option(p)
    p.add_argument("--source", action="append", dest="sources", metavar="NAME",
                   help="sync only this source (a datamart or change stream of the config); repeatable")
    p.set_defaults(run=run)


def run(args) -> int:
    from platform_assets.sync import sync  # imported here: it imports Dagster, a second

    result = on_instance(args, lambda cfg, instance: sync(cfg, instance, sources=args.sources))
    for dm, why in sorted(result.waiting.items()):
        print(f"{dm}: {why}")
    if result.failed:
        print(f"sync: {len(result.failed)} source(s) could not be read: {', '.join(sorted(result.failed))}")
    print(result.summary())
    return 0 if result.ok else 1

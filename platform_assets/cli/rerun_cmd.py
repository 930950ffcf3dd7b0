"""`deltaport rerun SOURCE N[-M]`: land deltas the source has landed once again, on the Dagster
instance of $DAGSTER_HOME (default ./.dagster), retired from Dagster by the partition window or
not (their partitions are put back); exits 0 when every run succeeded, 1 when one failed."""

from __future__ import annotations

from platform_assets.cli.common import add_config_option, on_instance


def register(sub) -> None:
    p = sub.add_parser("rerun", help="land landed deltas again (a retired delta's partition is put back)",
                       description=__doc__)
    p.add_argument("source", help="a source of the config")
    p.add_argument("deltas", help="N or N-M: the deltas to land again")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from platform_assets.rerun import parse_span, rerun  # imported here: it imports Dagster, a second

    first, last = parse_span(args.deltas)
    outcomes = on_instance(args, lambda cfg, instance: rerun(cfg, instance, args.source, first, last))
    ok = all(o.success for o in outcomes)
    print(f"rerun: {sum(len(o.deltas) for o in outcomes if o.success)} delta(s) landed again in "
          f"{len(outcomes)} run(s){'' if ok else ', a run failed'}")
    return 0 if ok else 1

"""The asset check `lag_within_bound` of each source (platform_assets/lag.py says what lag is).

Its evaluations come from the sensor's ticks, not from the delta job's runs: a lagging source
has no run to evaluate it in. Executing the check from the UI computes the lag now, and so does a
run that selects the snapshot by hand (a subset run, a UI materialization), because Dagster adds
the checks of the assets a run selects.
"""

import dagster as dg

from platform_assets.lag import LAG_CHECK, Lag, lag_evaluation, landed_through, prostore_lag, stream_lag, utc_now
from resources.changestream.resource import CdcLedgerResource
from resources.prostore.resource import DeltaIndexResource


def build_lag_check(*, source, kind: str, max_lag_seconds: float) -> dg.AssetChecksDefinition:
    """The check `lag_within_bound` on `<source>/snapshot`: evaluated by every sensor tick (not in
    the delta runs: a lagging source has no run to evaluate it); executing it computes it now."""
    key = dg.AssetKey([source.name, "snapshot"])
    about = (f"Fails when the lake is more than {max_lag_seconds:.0f} s behind {source.name} "
             "(sensor.max_lag_seconds): now minus the time of the oldest delta ready at the source and not landed.")

    def result(lag: Lag) -> dg.AssetCheckResult:
        evaluation = lag_evaluation(lag, max_lag_seconds)
        return dg.AssetCheckResult(passed=evaluation.passed, metadata=evaluation.metadata,
                                   description=evaluation.description)

    if kind == "prostore":
        @dg.asset_check(asset=key, name=LAG_CHECK, description=about)
        def prostore_lag_check(context: dg.AssetCheckExecutionContext, index: DeltaIndexResource):
            landed = landed_through(context.instance, source.name)
            return result(prostore_lag(source, index.get(), landed, utc_now()))
        return prostore_lag_check

    @dg.asset_check(asset=key, name=LAG_CHECK, description=about)
    def stream_lag_check(context: dg.AssetCheckExecutionContext, ledger: CdcLedgerResource):
        landed = landed_through(context.instance, source.name)
        return result(stream_lag(source, ledger.get(), landed, utc_now()))
    return stream_lag_check

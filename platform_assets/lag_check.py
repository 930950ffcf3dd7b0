"""The asset check `lag_within_bound` of each source (platform_assets/lag.py says what lag is).

Its evaluations come from the sensor's ticks, not from the delta job's runs: a lagging source
has no run to evaluate it in. Executing the check from the UI computes the lag now, as
`deltaport status` does (platform_assets/lag_live.py: the store's view plus what the topics hold
that no tick has read), and so does a run that selects the snapshot by hand (a subset run, a UI
materialization), because Dagster adds the checks of the assets a run selects.
"""

import dagster as dg

from platform_assets.lag import LAG_CHECK, Lag, lag_evaluation
from platform_assets.lag_live import live_lag
from resources.changestream.resource import CdcLedgerResource
from resources.kafka.resource import KafkaResource
from resources.prostore.resource import DeltaIndexResource
from resources.state.delta_marks import DeltaMarks
from resources.state.resource import StateStoreResource


def build_lag_check(*, source, kind: str, max_lag_seconds: float) -> dg.AssetChecksDefinition:
    """The check `lag_within_bound` on `<source>/snapshot`: evaluated by every sensor tick (not in
    the delta runs: a lagging source has no run to evaluate it); executing it computes it now."""
    key = dg.AssetKey([source.name, "snapshot"])
    about = (f"Fails when the lake is more than {max_lag_seconds:.0f} s behind {source.name} "
             "(sensor.max_lag_seconds): now minus when the oldest delta ready and not landed became available "
             "(its close or first backup message in Kafka, or its sealing), not its business date.")

    def result(lag: Lag) -> dg.AssetCheckResult:
        evaluation = lag_evaluation(lag, max_lag_seconds)
        return dg.AssetCheckResult(passed=evaluation.passed, metadata=evaluation.metadata,
                                   description=evaluation.description)

    if kind == "prostore":
        @dg.asset_check(asset=key, name=LAG_CHECK, description=about)
        def prostore_lag_check(context: dg.AssetCheckExecutionContext, index: DeltaIndexResource,
                               kafka: KafkaResource):
            return result(live_lag(source, kind=kind, instance=context.instance, kafka=kafka, index=index.get(),
                                   marks=DeltaMarks(index.store())))
        return prostore_lag_check

    @dg.asset_check(asset=key, name=LAG_CHECK, description=about)
    def stream_lag_check(context: dg.AssetCheckExecutionContext, ledger: CdcLedgerResource, kafka: KafkaResource,
                         index: StateStoreResource):
        return result(live_lag(source, kind=kind, instance=context.instance, kafka=kafka, ledger=ledger.get(),
                               marks=DeltaMarks(index.store())))
    return stream_lag_check

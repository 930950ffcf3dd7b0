"""The Dagster code location of deltaport: `defs` is what `dagster dev -w workspace.yaml` loads.

The delta-partitioned assets (signal events, changelog, increment, snapshot), sensors and
checks join here as they are built; until then the location loads empty, without error.
"""

import dagster as dg

defs = dg.Definitions()

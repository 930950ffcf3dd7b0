"""The lake's own landed mark per source, read and moved with Spark: `as_of.LANDED_PROPERTY` on
`lake.<source>_meta.manifest` (issue 57: a delta commits only to the tables it changes, so no
table's newest tag says how far the source has landed).

What flows through: a source and a delta number. Guarantees: the mark moves only forward (a
re-run of an older delta never lowers it) and only after every snapshot commit of the run that
lands it (the callers: `platform_assets/prostore/delta_step.py`, `platform_assets/streams/
delta_step.py`), before the state store's mark, so neither mark says more than the lake holds. It
is one metadata commit per source and delta, with no data file and no snapshot. A lake written
before the mark has none: readers then take the table's own newest tag (`as_of.source_landed`).
"""

from __future__ import annotations

from resources.failpoints import failpoint
from resources.lake.as_of import LANDED_PROPERTY
from resources.lake.layout import LakeLayout
from resources.spark import existence
from resources.spark.iceberg import _quote


def lake_landed_through(spark, layout: LakeLayout, source: str) -> int | None:
    """The source's lake mark, or None (no manifest yet, or a lake written before the mark). The
    manifest's cached metadata is refreshed first: another process may have moved it."""
    ident = layout.meta(source, "manifest")
    if not existence.refreshed(spark, ident):
        return None
    rows = spark.sql(f"SHOW TBLPROPERTIES {_quote(ident)} ('{LANDED_PROPERTY}')").collect()
    value = str(rows[0][1]) if rows else ""
    return int(value) if value.lstrip("-").isdigit() else None


def mark_landed(spark, layout: LakeLayout, source: str, delta: int) -> bool:
    """Move the source's lake mark to `delta` unless it is there or beyond already; True when
    moved. Called by the run that holds the source (one at a time), after its snapshot commits."""
    now = lake_landed_through(spark, layout, source)
    if now is not None and now >= int(delta):
        return False
    failpoint("lake.landed_mark")
    spark.sql(f"ALTER TABLE {_quote(layout.meta(source, 'manifest'))} "
              f"SET TBLPROPERTIES ('{LANDED_PROPERTY}'='{int(delta)}')")
    return True

"""Table properties an existing table must have, set once: for tables made before a property
became part of how deltaport creates them (e.g. merge-on-read on change-stream snapshots).

What flows through: a table's identifier and the properties it needs; at most one `SHOW
TBLPROPERTIES` and one `ALTER TABLE ... SET TBLPROPERTIES` per table and process. Guarantees: a
property already as wanted is not touched (no commit); once a table is seen right, this process
does not ask again (a round trip per table and delta saved). Several processes may set the same
values at once: Iceberg retries a conflicting metadata commit, and the values are the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from resources.spark.iceberg import _quote, _sql_str

_seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()


def ensure_properties(spark, ident: str, wanted: Mapping[str, str]) -> bool:
    """Set on table `ident` every property of `wanted` it lacks or holds otherwise; True when it
    had to (one commit), False when it was as wanted."""
    key = (ident, tuple(sorted(wanted.items())))
    if key in _seen:
        return False
    have = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {_quote(ident)}").collect()}
    missing = {k: v for k, v in wanted.items() if have.get(k) != v}
    if missing:
        pairs = ", ".join(f"{_sql_str(k)}={_sql_str(v)}" for k, v in sorted(missing.items()))
        spark.sql(f"ALTER TABLE {_quote(ident)} SET TBLPROPERTIES ({pairs})")
    _seen.add(key)
    return bool(missing)

"""Generated code for a session that meets a big table.

deltaport's embedded server evaluates queries interpreted (`session.SPARK_DEFAULTS`): generated
code inlines each delta's literals, so a small delta's queries compile anew every time
(docs/performance.md, "Generated code"). Interpreted evaluation pays per row instead, and a
steady delta reads its tables whole (the MERGE, the history's closed versions, the key check):
10k changes on a table of 20M rows took 28.3 s interpreted and 10.5 s with whole-stage code
generation, about 0.9 s per million rows (bench/size_bench.py on a quiet machine), while at
200k rows the two cost the same. So a writer about to apply deltas to a table of at least
`FROM_ROWS_KEY` rows (a server setting: `DEFAULT_FROM_ROWS` on the embedded server, 0 never)
turns generated code on for its session, from then on. A session is one process's (a Dagster
run, a CLI command): the run's small jobs then pay their compiles too, little beside the scans.

A server without the setting (a user's own cluster, `spark.remote`) keeps its own settings; a
lake that wants generated code always sets the two keys of `GENERATED` in its `spark.conf`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

FROM_ROWS_KEY = "spark.deltaport.codegen.fromRows"
DEFAULT_FROM_ROWS = 1_000_000  # where the compiles and the per-row cost cross: 0.5-1M rows
GENERATED: Mapping[str, str] = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}

_log = logging.getLogger("resources.spark.codegen")
_from_rows: dict[object, int | None] = {}  # session -> its threshold; None: on already, or never
_lock = threading.Lock()


def generate_code_for(spark, rows: int | None) -> bool:
    """Turn whole-stage code generation on for `spark`'s session if `rows` (the biggest table the
    caller is about to scan, an estimate) reaches the session's `FROM_ROWS_KEY`; True when this
    call turned it on. Asks the server once per session."""
    if not rows:
        return False
    session = getattr(spark, "session_id", None) or id(spark)
    with _lock:
        if session not in _from_rows:
            _from_rows[session] = threshold(spark.conf)
        from_rows = _from_rows[session]
        if from_rows is None or rows < from_rows:
            return False
        _from_rows[session] = None
    for key, value in GENERATED.items():
        spark.conf.set(key, value)
    _log.info("a table of about %d rows (>= %s = %d): whole-stage code generation on for this session",
              rows, FROM_ROWS_KEY, from_rows)
    return True


def threshold(conf) -> int | None:
    """The rows from which `generate_code_for` switches, from a session's `conf` (anything with
    `get(key, default)`); None when it never does: no setting, 0, or generated code on already."""
    text = conf.get(FROM_ROWS_KEY, None)
    try:
        from_rows = int(text) if text is not None else 0
    except ValueError:
        _log.warning("%s = %r is not a number of rows: generated code stays as the server has it",
                     FROM_ROWS_KEY, text)
        return None
    if from_rows <= 0 or str(conf.get("spark.sql.codegen.wholeStage", "true")).lower() == "true":
        return None
    return from_rows

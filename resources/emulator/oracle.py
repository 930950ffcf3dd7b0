"""The emulator's truth as a JSON document, for tools outside the test process.

Shape: {"datamarts": {dm: {"deltas": {"N": {"date": iso, "tables": {table: [row, ...]}}},
"cancelled": [...]}}, "injected": {kind: [...]}}. Rows are sorted by primary key; values are
JSON-friendly: dates, times and timestamps in ISO 8601, everything else as is.
"""

from __future__ import annotations

import datetime as dt

from resources.emulator.scenario import Scenario


def json_value(value: object) -> object:
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        return value.isoformat()
    return value


def truth_document(sc: Scenario) -> dict:
    datamarts = {}
    for name, deltas in sc.truth.items():
        datamarts[name] = {
            "deltas": {
                str(n): {
                    "date": sc.delta_dates[name][n].isoformat(),
                    "tables": {
                        table: [{k: json_value(v) for k, v in rows[key].items()} for key in sorted(rows, key=repr)]
                        for table, rows in sorted(state.items())
                    },
                }
                for n, state in sorted(deltas.items())
            },
            "cancelled": sc.cancelled[name],
        }
    return {"datamarts": datamarts, "injected": {k: [list(x) for x in v] for k, v in sc.injected.items()}}

"""Where a benchmark's results go: its JSON file (bench-results/<name>.json) and its summary,
one JSON line on stdout."""

from __future__ import annotations

import json
from pathlib import Path


def save_results(res: dict, out: Path) -> dict:
    """Write `res` to `out` (folders made) and print its "summary" as one JSON line; the summary."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print(json.dumps(res["summary"]))
    return res["summary"]

"""The Spark SQL executions an embedded server ran, from its UI's REST API: what a phase of a
benchmark cost the server, execution by execution (bench/size_bench.py, bench/dagster_bench.py).

What flows through: the server's UI port in; out, per execution since the last mark, its id,
its start (seconds since the mark), its seconds and its notable plan nodes (a write, a join and
its kind, a shuffle, a scan and its table). The UI must be on (`spark.ui.enabled=true`,
`spark.ui.port=<free_port()>`): deltaport's small-machine defaults turn it off.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ui_conf(port: int) -> dict[str, str]:
    """The server settings that turn its UI (and REST API) on at `port`."""
    return {"spark.ui.enabled": "true", "spark.ui.port": str(port)}


class SqlLog:
    """The Spark SQL executions the server ran since the last `mark()` (its UI REST API)."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.app = None
        self.seen = -1
        self.marked_at: dt.datetime | None = None

    def _get(self, path: str):
        with urllib.request.urlopen(f"{self.base}{path}", timeout=30) as r:
            return json.loads(r.read())

    def executions(self) -> list[dict]:
        if self.app is None:
            self.app = self._get("/applications")[0]["id"]
        out, offset = [], 0
        while True:
            page = self._get(f"/applications/{self.app}/sql?details=true&offset={offset}&length=500")
            out += page
            offset += len(page)
            if len(page) < 500:
                return out

    def mark(self) -> None:
        self.seen = max((e["id"] for e in self.executions()), default=-1)
        self.marked_at = dt.datetime.now(dt.timezone.utc)

    def since(self) -> list[dict]:
        new = [e for e in self.executions() if e["id"] > self.seen]
        self.seen = max([self.seen, *[e["id"] for e in new]])
        return [{"id": e["id"], "start_s": self._offset(e.get("submissionTime")),
                 "s": round(e.get("duration", 0) / 1000, 2), "what": _plan_words(e)} for e in new]

    def _offset(self, submitted: str | None) -> float | None:
        """Seconds from the last mark to `submitted` (the UI's "2026-11-26T08:40:01.123GMT")."""
        if not submitted or self.marked_at is None:
            return None
        at = dt.datetime.strptime(submitted.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
        return round((at - self.marked_at).total_seconds(), 2)


# The plan nodes that say what an execution did (a write, a join and its kind, a shuffle).
NOTABLE = ("WriteDelta", "ReplaceData", "AppendData", "OverwritePartitionsDynamic", "OverwriteByExpression",
           "MergeRows", "SortMergeJoin", "BroadcastHashJoin", "ShuffledHashJoin", "BroadcastNestedLoopJoin",
           "Exchange", "HashAggregate", "BatchScan", "LocalTableScan", "Window", "CreateTag", "ReplaceTag")


def _plan_words(execution: dict) -> str:
    """`execution`'s notable plan nodes, each with how often it occurs (BatchScan with its table)."""
    seen: dict[str, int] = {}
    for node in execution.get("nodes", []):
        name = node.get("nodeName", "")
        word = next((w for w in NOTABLE if name.startswith(w)), None)
        if word == "BatchScan":
            word = "Scan " + name.split()[-1] if len(name.split()) > 1 else word
        if word:
            seen[word] = seen.get(word, 0) + 1
    return ", ".join(f"{w} x{c}" if c > 1 else w for w, c in seen.items()) or " ".join(
        str(execution.get("description", "")).split())[:60]

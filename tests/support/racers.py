"""Processes that race each other on one state store (spawned by tests/integration/test_state_store.py):
each indexes or seals the same topics in small bounded steps until told the traffic is complete
and it has read everything, as a sensor daemon and a `sync` on two hosts would."""

from __future__ import annotations

import time
import traceback
from dataclasses import replace


def report(results, target, args) -> None:
    """Run target(*args) and put its result, or its traceback as text, on `results`."""
    try:
        results.put(target(*args))
    except BaseException:  # noqa: BLE001 - the parent shows it
        results.put(traceback.format_exc())


def index_racer(bootstrap: str, topics: dict[str, str], url: str, password_env: str | None, done, step: int) -> int:
    """Index `topics` ({kind: topic}) until `done` is set and a pass reads nothing; returns calls."""
    from resources.prostore.delta_index import DeltaIndex
    from resources.prostore.ingest import ingest_topic
    from resources.state.store import StateStore

    index = DeltaIndex(StateStore(url, password_env=password_env))
    calls = 0
    while True:
        finished = done.is_set()  # read before the pass: a pass after it sees every message
        remaining = 0
        for kind, topic in topics.items():
            res = ingest_topic(bootstrap, topic, index, kind, max_messages=step)
            remaining += res.remaining
            calls += 1
        if finished and remaining == 0:
            return calls
        time.sleep(0.01)


def seal_racer(bootstrap: str, topic: str, source: str, fmt: str, max_rows: int, url: str,
               password_env: str | None, done, step: int) -> int:
    """Seal `source` from `topic` until `done` is set and a pass reads nothing, then flush the
    idle tail; returns calls."""
    from resources.changestream.ledger import CdcLedger
    from resources.changestream.sealing import SealPolicy, seal_topic
    from resources.state.store import StateStore

    ledger = CdcLedger(StateStore(url, password_env=password_env))
    policy = SealPolicy(fmt, max_rows=max_rows, max_seconds=30)
    calls = 0
    while True:
        finished = done.is_set()
        res = seal_topic(bootstrap, topic, source, ledger, policy, max_messages=step)
        calls += 1
        if finished and res.remaining == 0:
            break
        time.sleep(0.01)
    seal_topic(bootstrap, topic, source, ledger, replace(policy, seal_idle_after_seconds=0))
    return calls + 1

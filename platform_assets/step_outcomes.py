"""What each asset of a multi-asset step came to, and how the step fails.

A source's assets land in one step (platform_assets/prostore/delta_step.py,
platform_assets/streams/delta_step.py), their independent work side by side. Each asset's part
runs through `timed`, which keeps its result or the error that stopped it, so one asset's
failure never hides another's result; once every part has ended the step raises `step_failure`
of the failed ones: deltaport's own errors as one `dg.Failure` naming each asset and the run's
deltas, anything else (a bug, an engine failure) as itself, with its traceback whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from resources.errors import DeltaportError
from resources.lake.source_tables import MissingDeltasError


class ChangelogNotLandedError(DeltaportError):
    """The increment's tables committed but the changelog of the same deltas did not: the
    deltas are not recorded as landed (a re-run lands both)."""


@dataclass
class Outcome:
    """One asset's part of the step: its result, or the error that stopped it."""

    key: dg.AssetKey
    result: object = None
    error: BaseException | None = None
    seconds: float = 0.0


def timed(key: dg.AssetKey, fn: Callable[[], object]) -> Outcome:
    started = time.monotonic()
    try:
        return Outcome(key, fn(), seconds=time.monotonic() - started)
    except Exception as exc:  # reported with the asset it stopped, once the others are done
        return Outcome(key, error=exc, seconds=time.monotonic() - started)


def step_failure(failed: Sequence[Outcome], span: str) -> BaseException:
    """What the step raises for its failed assets (module docstring)."""
    other = next((o.error for o in failed if not isinstance(o.error, DeltaportError)), None)
    if other is not None:
        return other
    missing = next((o.error.missing for o in failed if isinstance(o.error, MissingDeltasError)), None)
    return dg.Failure(description="; ".join(f"{o.key.to_user_string()}[{span}]: {o.error}" for o in failed),
                      metadata={"error": ", ".join(type(o.error).__name__ for o in failed),
                                **({"missing_deltas": missing} if missing is not None else {})})

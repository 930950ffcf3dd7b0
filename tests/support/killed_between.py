"""A run killed between two tables' snapshot commits, for the tests of the source's landed mark
(tests/integration/test_progress_mark.py, test_stream_progress_mark.py): the snapshot's own
failpoint raises once, so the run fails after one table's commit and before the mark moves."""

from __future__ import annotations


def dies_once_at(monkeypatch, module, point: str):
    """Make `module.failpoint` raise the first time the run passes `point`; every other pass goes
    on as before. Returns the real failpoint, to put back once the run has died."""
    real = module.failpoint
    dies = iter([True])

    def dying(name: str) -> None:
        if name == point and next(dies, False):
            raise RuntimeError("killed between tables")
        real(name)

    monkeypatch.setattr(module, "failpoint", dying)
    return real

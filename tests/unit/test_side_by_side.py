"""Tables worked on at once: results in the calls' order, and a failure is raised only once every
call has ended (no commit of a failed step left running)."""

import threading
import time

import pytest

from resources.lake.side_by_side import side_by_side


def test_results_come_in_the_calls_order_and_the_calls_overlap():
    running, most = [], []
    lock = threading.Lock()

    def work(name: str, seconds: float) -> str:
        with lock:
            running.append(name)
            most.append(len(running))
        time.sleep(seconds)
        with lock:
            running.remove(name)
        return name.upper()

    assert side_by_side(work, [("a", 0.3), ("b", 0.1), ("c", 0.2)]) == ["A", "B", "C"]
    assert max(most) > 1


def test_the_first_failure_is_raised_after_every_call_has_ended():
    ended = []

    def work(name: str) -> str:
        if name == "bad":
            raise ValueError("bad table")
        time.sleep(0.3)
        ended.append(name)
        return name

    with pytest.raises(ValueError, match="bad table"):
        side_by_side(work, [("bad",), ("slow",), ("slower",)])
    assert sorted(ended) == ["slow", "slower"]

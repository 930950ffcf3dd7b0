"""Failpoints: which pass fires, and DELTAPORT_FAILPOINTS_ONCE (one process fires, the retry after
it passes)."""

import resources.failpoints as fp


def _armed(monkeypatch, spec, once=None):
    fired = []
    monkeypatch.setattr(fp, "_die", lambda: fired.append(True))
    monkeypatch.setattr(fp, "_passes", fp.Counter())
    monkeypatch.setenv(fp.ENV, spec)
    if once is not None:
        monkeypatch.setenv(fp.ONCE_ENV, str(once))
    else:
        monkeypatch.delenv(fp.ONCE_ENV, raising=False)
    return fired


def test_the_kth_pass_fires(monkeypatch):
    fired = _armed(monkeypatch, "snapshot.committed@2")
    fp.failpoint("snapshot.committed")
    assert fired == []
    fp.failpoint("snapshot.committed")
    assert fired == [True]
    fp.failpoint("snapshot.committed")
    assert fired == [True]


def test_once_fires_in_the_first_process_only_and_records_it(monkeypatch, tmp_path):
    once = tmp_path / "fired"
    fired = _armed(monkeypatch, "increment.write", once)
    fp.failpoint("increment.write")
    assert fired == [True] and once.read_text().isdigit()
    # Another process (the retried run): its own pass count, the same marker file.
    fired_again = _armed(monkeypatch, "increment.write", once)
    fp.failpoint("increment.write")
    assert fired_again == []


def test_unset_does_nothing(monkeypatch):
    fired = _armed(monkeypatch, "")
    fp.failpoint("not.even.a.point")
    assert fired == []

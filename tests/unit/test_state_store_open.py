"""Opening one new SQLite state store from several processes at once (a sensor and a `sync`
starting together): every opener gets the store, none a "database is locked"."""

import threading

from resources.state.store import StateStore

MIGRATIONS = ["CREATE TABLE IF NOT EXISTS opened (who INTEGER PRIMARY KEY)"]


def _open_and_write(path, who, barrier, errors):
    barrier.wait()
    try:
        store = StateStore(path)  # a store of its own: its own connections, as another process has
        store.migrate("opened", MIGRATIONS)
        with store.transaction("opened") as db:
            db.execute("INSERT INTO opened VALUES (?)", (who,))
    except Exception as exc:  # noqa: BLE001 - collected for the assertion
        errors.append(repr(exc))


def test_openers_racing_on_a_new_file_all_get_the_store(tmp_path):
    # Turning a new file to WAL fails at once, without waiting, for the loser of such a race: about
    # one race in seven here before the store waited for it. 150 races, two or three openers each.
    errors: list[str] = []
    for trial in range(150):
        path = tmp_path / f"store-{trial}.sqlite"
        openers = 2 + trial % 2
        barrier = threading.Barrier(openers)
        threads = [threading.Thread(target=_open_and_write, args=(path, who, barrier, errors))
                   for who in range(openers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not errors:
            with StateStore(path).connect() as db:
                assert db.execute("SELECT count(*) FROM opened").fetchone()[0] == openers
    assert not errors, f"{len(errors)} openers failed, first: {errors[0]}"

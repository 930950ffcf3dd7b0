"""resources/spark/existence.py: what is remembered (a "yes", per session), what is asked again
(a "no", a forgotten table), with a stand-in session whose catalog counts the questions."""

from __future__ import annotations

import uuid

from resources.spark import existence


class _Catalog:
    def __init__(self, tables=(), namespaces=()):
        self.tables, self.namespaces, self.asked = set(tables), set(namespaces), []

    def tableExists(self, ident):  # noqa: N802 - pyspark's name
        self.asked.append(ident)
        return ident in self.tables

    def databaseExists(self, name):  # noqa: N802
        self.asked.append(name)
        return name in self.namespaces


class _Session:
    def __init__(self, catalog):
        self.catalog, self.session_id = catalog, uuid.uuid4().hex


def test_a_yes_is_remembered_per_session_and_a_no_is_asked_again():
    catalog = _Catalog(tables={"lake.a.t"}, namespaces={"`lake`.`a`"})
    one, two = _Session(catalog), _Session(catalog)
    assert existence.table_exists(one, "lake.a.t") and existence.table_exists(one, "lake.a.t")
    assert not existence.table_exists(one, "lake.a.u") and not existence.table_exists(one, "lake.a.u")
    assert catalog.asked == ["lake.a.t", "lake.a.u", "lake.a.u"]
    assert existence.table_exists(two, "lake.a.t") and catalog.asked[-1] == "lake.a.t"  # its own session
    catalog.tables.add("lake.a.u")  # made meanwhile, by anyone: seen at the next question
    assert existence.table_exists(one, "lake.a.u")
    assert existence.namespace_exists(one, "lake", "a") and existence.namespace_exists(one, "lake", "a")
    assert not existence.namespace_exists(one, "lake", "b")
    assert catalog.asked[-2:] == ["`lake`.`a`", "`lake`.`b`"]


def test_a_forgotten_table_is_asked_about_again():
    catalog = _Catalog(tables={"lake.a.t"})
    session = _Session(catalog)
    assert existence.table_exists(session, "lake.a.t")
    catalog.tables.clear()  # dropped under the running process
    existence.forget(session, "lake.a.t")
    assert not existence.table_exists(session, "lake.a.t") and catalog.asked == ["lake.a.t", "lake.a.t"]

"""The import graph of the product (`resources/`, `platform_assets/`) and the bench: no circle, and
no import that climbs the layer order written in docs/how-it-works.md ("Layers").

Imports inside functions count: a circle or a climb hidden in a function is still one a reader
must hold in mind. The graph is built from the source text (ast), never by importing it, so the
test needs no Kafka, Spark or Dagster. Its logic follows shared/tools/import_circles.py.

`KNOWN_CLIMBS` lists the climbs the redesign (issue 59) has not moved away yet; the test fails on
any climb not listed, and on a listed one that is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("platform_assets", "resources", "bench")

# Lowest first. A module may import its own layer and the layers below. In a layer marked
# `siblings`, each listed prefix is a package of its own kind (one per source kind) and may not
# import another of the layer: what two of them share belongs to a lower layer.
LAYERS: list[tuple[str, tuple[str, ...], bool]] = [
    ("base", ("resources", "resources.errors", "resources.net", "resources.java", "resources.javac",
              "resources.maven", "resources.class_archive", "resources.failpoints", "resources.codecs"), False),
    # A change-stream format's wire side (codec glue, boundary rule, type names); its emulator side
    # (`EMULATOR_PARTS` in a format's folder) sits with the emulator.
    ("stream formats", ("resources.formats",), False),
    ("state", ("resources.state",), False),
    ("kafka client", ("resources.kafka",), False),
    ("source kinds", ("resources.prostore", "resources.changestream"), True),
    ("spark", ("resources.spark",), False),
    ("lake", ("resources.lake", "resources.demo_objstore", "resources.warm_archives"), False),
    ("emulator", ("resources.emulator",), False),
    ("platform core", ("platform_assets",), False),
    ("asset formats", ("platform_assets.prostore", "platform_assets.streams"), True),
    ("wiring", ("platform_assets.definitions", "platform_assets.sync", "platform_assets.rerun",
                "platform_assets.cli", "platform_assets.examples"), False),
    ("bench", ("bench",), False),
]

KNOWN_CLIMBS: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The tree's own modules `path` imports, anywhere in it (functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)] if pkg else []
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:  # `from pkg import name`: name may be a symbol, not a module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    files = [p for d in TREES for p in (ROOT / d).rglob("*.py")]
    names = {module_name(p): p for p in files}
    known = set(names)
    return {n: imports_of(p, n, known) for n, p in names.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


# The modules of a format's own folder (resources/formats/<name>/) that are its emulator's: they
# belong to the emulator layer, above the wire side the platform imports.
EMULATOR_PARTS = ("emulator", "oracle", "emulated")


def place(module: str) -> tuple[int, str]:
    """(layer number, the layer's prefix) of `module`: the longest prefix that names it."""
    parts = module.split(".")
    if parts[:2] == ["resources", "formats"] and len(parts) == 4 and parts[3] in EMULATOR_PARTS:
        return next(n for n, (name, _, _) in enumerate(LAYERS) if name == "emulator"), "resources.emulator"
    best = (-1, "", "")
    for number, (_, prefixes, _) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best[2]):
                best = (number, prefix, prefix)
    assert best[0] >= 0, f"{module} is in no layer: add it to LAYERS (and to docs/how-it-works.md)"
    return best[0], best[1]


def climbs(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    out = set()
    for module, targets in graph.items():
        layer, prefix = place(module)
        for target in targets:
            t_layer, t_prefix = place(target)
            if t_layer > layer or (t_layer == layer and LAYERS[layer][2] and t_prefix != prefix):
                out.add((module, target))
    return out


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_no_import_climbs_the_layers():
    found = climbs(import_graph())
    assert sorted(found - KNOWN_CLIMBS) == [], "imports that climb the layer order (docs/how-it-works.md)"
    assert sorted(KNOWN_CLIMBS - found) == [], "climbs moved away: take them out of KNOWN_CLIMBS"


def test_the_checks_can_fail():
    # A circle and a climb written by hand are found, so the two tests above are not vacuous.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = {"resources.kafka.scan": {"platform_assets.sync"},
             "resources.prostore.ingest": {"resources.changestream.ledger"},
             "platform_assets.sync": {"resources.kafka.scan"}}
    assert climbs(graph) == {("resources.kafka.scan", "platform_assets.sync"),
                             ("resources.prostore.ingest", "resources.changestream.ledger")}

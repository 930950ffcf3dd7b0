"""`deltaport read` run with both engines, for tests that compare them: what the PyIceberg engine
(no JVM) prints must be what the Spark engine prints, byte for byte, and so must its comment lines."""

from __future__ import annotations

from platform_assets.cli import main


def read_with_both_engines(config, table: str, flags, capsys) -> str:
    """The Spark engine's stdout of `deltaport read TABLE FLAGS`, once the PyIceberg engine has
    printed the same text and the same `# ` comment lines on stderr (both must succeed)."""
    capsys.readouterr()
    out = {}
    for engine in ("spark", "pyiceberg"):
        code = main(["read", table, "--config", str(config), "--engine", engine, *flags])
        out[engine] = capsys.readouterr()
        assert code == 0, f"--engine {engine} {' '.join(flags)}: {out[engine].err[-2000:]}"
    assert out["pyiceberg"].out == out["spark"].out, f"{table} {' '.join(flags)}: the engines differ"
    comments = {e: [line for line in o.err.splitlines() if line.startswith("# ")] for e, o in out.items()}
    assert comments["pyiceberg"] == comments["spark"], f"{table} {' '.join(flags)}: comment lines"
    return out["spark"].out

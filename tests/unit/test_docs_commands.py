"""Every command the README and docs/ show still exists as shown.

Each `deltaport ...` line of a shell block is parsed by the CLI's own argparse parser, in every
form the line offers:
- `a|b` alternatives;
- each `[optional part]` alone;
- placeholders (N, M, D) as 1.

Each `make X` line names a target the Makefile has. Each `bench/<script>.py --flag ...` the docs
show (inline or in a block: performance.md's reproductions) names a script that exists and flags
it defines. The commands themselves are run by their
own tests (tests/integration: sync, read, inspect, status, export, emulate, spark, demo), so a
flag renamed or removed fails here, naming the file and the line.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from platform_assets.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SHELL = ("```sh", "```bash", "```shell")


def shown_commands() -> list[tuple[str, int, str]]:
    """(file, line number, command without its comment) of every deltaport/make line in a shell block."""
    out = []
    for doc in DOCS:
        block = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if line.startswith("```"):
                block = not block and line.strip() in _SHELL
                continue
            text = line.split(" # ", 1)[0].strip()
            if block and re.match(r"(\.venv/bin/)?(deltaport|make)\b", text):
                out.append((doc.relative_to(ROOT).as_posix(), number, text))
    return out


def forms(command: str) -> list[list[str]]:
    """The argument lists a documented command line stands for (module docstring)."""
    optional = re.findall(r"\[([^\]]*)\]", command)
    base = re.sub(r"\s*\[[^\]]*\]", "", command)
    variants = [base] + [f"{base} {choice.strip()}" for part in optional for choice in part.split(" | ")]
    out = []
    for variant in variants:
        words = shlex.split(variant)[1:]  # without `deltaport`; quoted words as a shell reads them
        for i, word in enumerate(words):
            if "|" in word and not word.startswith("-"):
                for alternative in word.split("|"):
                    out.append([*words[:i], alternative, *words[i + 1:]])
                break
        else:
            out.append(words)
    return [[re.sub(r"^[A-Z]$", "1", w).split("|")[0] for w in words] for words in out]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deltaport", exit_on_error=False)
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


COMMANDS_SHOWN = shown_commands()


def test_the_docs_show_commands():
    assert len([c for c in COMMANDS_SHOWN if "deltaport" in c[2]]) >= 10


@pytest.mark.parametrize("where,number,command", COMMANDS_SHOWN, ids=[f"{w}:{n}" for w, n, _ in COMMANDS_SHOWN])
def test_a_documented_command_parses(where, number, command, capsys):
    if command.split()[0] == "make":
        target = command.split()[1]
        makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{where}:{number}: no make target {target!r}"
        return
    for argv in forms(command):
        try:
            parser().parse_args(argv)
        except (SystemExit, argparse.ArgumentError) as exc:
            pytest.fail(f"{where}:{number}: `deltaport {' '.join(argv)}` does not parse: {exc} "
                        f"{capsys.readouterr().err.strip()}")


# `bench/<script>.py --flag ...` in a code span (inline or wrapped over lines) or a shell line.
_BENCH = re.compile(r"(bench/[a-z_]+\.py)((?:[ \t\n]+(?:--?[a-z][\w-]*(?:[ =](?:'[^']*'|[^\s`|'-][^\s`|]*))?))*)")


def bench_commands() -> list[tuple[str, str, list[str]]]:
    """(file, script, flags) of every bench script a doc shows with its flags."""
    out = []
    for doc in DOCS:
        for m in _BENCH.finditer(doc.read_text(encoding="utf-8")):
            out.append((doc.relative_to(ROOT).as_posix(), m.group(1), re.findall(r"(?<!\S)(--[a-z][\w-]*)", m.group(2))))
    return out


def test_every_bench_script_the_docs_show_has_the_flags_they_show():
    shown = bench_commands()
    assert len([s for s in shown if s[2]]) >= 10  # performance.md's commands, at least
    problems = []
    for where, script, flags in shown:
        path = ROOT / script
        if not path.exists():
            problems.append(f"{where}: {script} does not exist")
            continue
        source = path.read_text(encoding="utf-8")
        # options a script takes from a bench module it imports (size_stream_bench: size_bench's add_size_args)
        for module in re.findall(r"^from bench\.([a-z_]+) import", source, flags=re.M):
            if (ROOT / "bench" / f"{module}.py").exists():
                source += (ROOT / "bench" / f"{module}.py").read_text(encoding="utf-8")
        problems += [f"{where}: {script} has no option {flag}" for flag in flags if f'"{flag}"' not in source]
    assert not problems, "\n".join(problems)

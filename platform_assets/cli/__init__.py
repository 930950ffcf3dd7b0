"""The `deltaport` command line: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from platform_assets.cli.common import short_lived_collector
from resources.errors import DeltaportError

# Command -> the module that registers and runs it. Only the module of the command being run is
# imported: each brings its own libraries (demo the emulator and the Kafka client, sync Dagster),
# and a `deltaport read` that imported them all spent longer importing than reading.
COMMAND_MODULES = {"broker": "broker_cmd", "spark": "spark_cmd", "emulate": "emulate_cmd", "inspect": "inspect_cmd",
                   "sync": "sync_cmd", "rerun": "rerun_cmd", "status": "status_cmd", "read": "read_cmd",
                   "export": "export_cmd", "sql": "sql_cmd", "demo": "demo_cmd"}


def _modules(names) -> tuple:
    return tuple(importlib.import_module(f"{__name__}.{COMMAND_MODULES[n]}") for n in names)


def __getattr__(name: str):
    if name == "COMMANDS":  # every command's module, in COMMAND_MODULES' order (the docs' tests read them all)
        return _modules(COMMAND_MODULES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None  # `deltaport ...`: the process runs this one command, then ends
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="deltaport", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # `deltaport --help`, no command or an unknown one: every command, for the help and the error
    for module in _modules([command] if command in COMMAND_MODULES else COMMAND_MODULES):
        module.register(sub)
    args = parser.parse_args(argv)
    # A command that sets `short_lived` (one query, one answer) runs without the cyclic collector
    # when it has the process to itself; a caller's process (tests, notebooks) keeps its own.
    short = own_process and getattr(args, "short_lived", False)
    try:
        with short_lived_collector() if short else contextlib.nullcontext():
            return args.run(args)
    except DeltaportError as err:
        print(f"deltaport {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `deltaport read ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except KeyboardInterrupt:
        print(f"deltaport {args.command}: interrupted", file=sys.stderr)
        return 130

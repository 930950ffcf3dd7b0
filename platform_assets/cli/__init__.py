"""The `deltaport` command line: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import os
import sys

from platform_assets.cli import (broker_cmd, demo_cmd, emulate_cmd, export_cmd, inspect_cmd, read_cmd, spark_cmd,
                                 status_cmd, sync_cmd)
from resources.errors import DeltaportError

COMMANDS = (broker_cmd, spark_cmd, emulate_cmd, inspect_cmd, sync_cmd, status_cmd, read_cmd, export_cmd, demo_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deltaport", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    args = parser.parse_args(argv)
    try:
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

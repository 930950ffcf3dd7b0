"""The demo's faults (platform_assets/cli/demo_cmd.py): a healthy demo sends no malformed message,
so every check it shows passes; `--bad-input` sends one of each kind, which the platform quarantines."""

from __future__ import annotations

import argparse

from platform_assets.cli import demo_cmd
from resources.emulator.scenario import EmulatorConfig, build_scenario


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


def test_the_plain_demo_sends_no_malformed_message_and_bad_input_sends_them():
    assert not _args(["--once"]).bad_input and _args(["--once", "--bad-input"]).bad_input
    plain, bad = (build_scenario(EmulatorConfig(seed=42, deltas=4, faults=demo_cmd.demo_faults(b)))
                  for b in (False, True))
    assert "malformed" not in plain.injected and bad.injected["malformed"]
    # The faults the platform recovers from by itself stay in both.
    assert plain.injected["reexport"] and plain.injected.keys() - {"malformed"} == bad.injected.keys() - {"malformed"}

"""Where a run's test definition comes from: a TOML FILE, or a shipped `--scenario NAME`.

`run`, `sweep` and `find-peak` take either; with neither they read the `server` sample,
so `loadgen run --sut SPEC --set k=v` needs no file at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.errors import SettingsError
from loadgen.plan.samples import DEFAULT_SCENARIO, sample_file

__all__ = ["add_definition_args", "definition_path"]


def add_definition_args(p: argparse.ArgumentParser) -> None:
    """FILE (optional) and --scenario NAME on a subcommand."""
    p.add_argument("file", type=Path, nargs="?",
                   help="TOML test definition (default: the --scenario sample)")
    p.add_argument("--scenario", metavar="NAME",
                   help=f"a shipped sample instead of FILE: server, offline, single_stream, "
                        f"multi_stream, ... (`loadgen scenarios` lists them; default "
                        f"{DEFAULT_SCENARIO})")


def definition_path(args: argparse.Namespace) -> Path:
    """The FILE given, else the sample --scenario names (default server)."""
    if args.file is not None and args.scenario is not None:
        raise SettingsError([f"give a FILE ({args.file}) or --scenario {args.scenario}, not both"])
    if args.file is not None:
        return Path(args.file)
    return sample_file(args.scenario or DEFAULT_SCENARIO)

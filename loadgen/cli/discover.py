"""What a new user asks first: `loadgen scenarios`, `loadgen settings`, `loadgen --version`.

    loadgen scenarios                  the shipped sample test definitions, one a line
    loadgen settings [--scenario S]    every key: default (in S), unit, meaning
"""

from __future__ import annotations

import argparse
from importlib import metadata

__all__ = ["add_parsers", "version_text"]


def version_text() -> str:
    """`loadgen X.Y.Z (python A.B.C)`, from the installed distribution's metadata."""
    import platform

    try:
        version = metadata.version("loadgen")
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    return f"loadgen {version} (python {platform.python_version()})"


def _scenarios(args: argparse.Namespace) -> int:
    from loadgen.plan.samples import samples

    found = samples()
    width = max(len(s.name) for s in found)
    for s in found:
        print(f"{s.name:<{width}}  {s.summary}")
    print("\nuse one with --scenario NAME (run, sweep, find-peak), e.g. "
          "loadgen run --scenario offline --sut null --set preset=dev")
    return 0


def _settings(args: argparse.Namespace) -> int:
    from loadgen.plan.catalog import catalog
    from loadgen.plan.samples import sample_file
    from loadgen.plan.settings import load_settings

    settings = None if args.scenario is None else load_settings(sample_file(args.scenario))
    rows = [("key", "default", "unit", "meaning")] + [
        (d.key, d.default, d.unit or "-", d.meaning) for d in catalog(settings)]
    widths = [min(28, max(len(r[i]) for r in rows)) for i in range(3)]
    for row in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row[:3], widths, strict=True))
              + "  " + row[3])
    where = f"the {args.scenario} sample" if args.scenario else "Server's defaults, no file"
    print(f"\ndefaults: {where}; set any key with --set KEY=VALUE (TOML literal) or in a "
          "TOML file")
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `scenarios` and `settings` on the `loadgen` subparsers."""
    p = sub.add_parser("scenarios", help="list the sample test definitions shipped with loadgen",
                       description="List the shipped sample test definitions; run one with "
                                   "--scenario NAME.")
    p.set_defaults(handler=_scenarios)
    p = sub.add_parser("settings", help="every setting with its default, unit and meaning",
                       description="Print every setting key with its default, unit and "
                                   "meaning; with --scenario, the defaults of that sample.")
    p.add_argument("--scenario", metavar="NAME",
                   help="show the values of this sample (see `loadgen scenarios`)")
    p.set_defaults(handler=_settings)

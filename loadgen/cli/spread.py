"""Where load workers run, from the command line: `--ray ADDRESS|auto|local`, `--per-node K`.

Without `--ray`, `--workers N` starts N local processes. With it, the N workers
are Ray actors: `local` starts a Ray instance on this machine, `auto` joins the
cluster this machine is part of, HOST:PORT joins that cluster's head (the GCS
address `ray start --head` prints).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from loadgen.errors import SettingsError

if TYPE_CHECKING:
    from loadgen.campaigns.launch import Launcher
    from loadgen.engine.workers.ray_actors import RayEngine

__all__ = ["add_spread_options", "launcher", "spread_engine", "workers_overrides"]


def add_spread_options(p: argparse.ArgumentParser, workers: bool = False) -> None:
    """--ray and --per-node (and --workers, for a command that lacks it)."""
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the load workers as Ray actors: 'local' (start Ray here), 'auto' "
                        "(this machine's cluster) or HOST:PORT (join that cluster)")
    p.add_argument("--per-node", type=int, metavar="K", default=None,
                   help="with --ray: K workers to a node (default: spread, one per node)")
    if workers:
        p.add_argument("--workers", type=int, metavar="N", default=None,
                       help="N load workers, each issuing a seeded share of the schedule")


def workers_overrides(args: argparse.Namespace) -> list[str]:
    """`--workers N` as a settings override."""
    return [] if getattr(args, "workers", None) is None else [f"workers={args.workers}"]


@contextlib.contextmanager
def spread_engine(args: argparse.Namespace) -> Iterator[RayEngine | None]:
    """The Ray engine `--ray` asks for (None without it); left when the command ends."""
    if args.ray is None:
        if args.per_node is not None:
            raise SettingsError(["--per-node: only with --ray"])
        yield None
        return
    from loadgen.engine.workers.ray_actors import RayEngine

    engine = RayEngine(args.ray, args.per_node)
    try:
        yield engine
    finally:
        engine.shutdown()


def launcher(engine: RayEngine | None) -> Launcher:
    """Campaign launches on the engine (or local processes)."""
    from loadgen.campaigns.launch import OnEngine, launch

    return launch if engine is None else OnEngine(engine)

"""Entry point of the `atoll` command: builds the parser from the subcommand modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from atoll import __version__

# Subcommand modules, each with `register(subparsers)` that adds its parser and sets `func`.
SUBCOMMANDS = (
    "atoll.cli.run_cmd",
    "atoll.cli.sandbox_cmd",
    "atoll.cli.demo_cmd",
    "atoll.cli.crds_cmd",
    "atoll.cli.simulate_cmd",
    "atoll.cli.explain_cmd",
    "atoll.cli.topology_cmd",
)


def _print_version(_args: argparse.Namespace) -> int:
    print(f"atoll {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atoll",
        description=(
            "Kueue-compatible gang admission controller for GPU clusters on Kubernetes. "
            "Admits whole gangs against Kueue ClusterQueue quota and GPU topology."
        ),
    )
    parser.add_argument("--version", action="version", version=f"atoll {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    version = sub.add_parser("version", help="print atoll's version")
    version.set_defaults(func=_print_version)
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

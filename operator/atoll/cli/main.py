"""Entry point of the `atoll` command: builds the parser from the subcommand modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

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
COMMANDS = {
    "run": "atoll.cli.run_cmd",
    "sandbox": "atoll.cli.sandbox_cmd",
    "demo": "atoll.cli.demo_cmd",
    "crds": "atoll.cli.crds_cmd",
    "simulate": "atoll.cli.simulate_cmd",
    "what-if": "atoll.cli.simulate_cmd",
    "explain": "atoll.cli.explain_cmd",
    "topology": "atoll.cli.topology_cmd",
}
"""The module of each command. A command line naming one imports only that module: each
module imports what its command needs (`atoll run` the operator, without the simulator,
the sandbox's certificates or rich's tables: ~20 MiB less resident memory)."""


def _print_version(_args: argparse.Namespace) -> int:
    print(f"atoll {__version__}")
    return 0


def _command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first argument that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the one `argv` names (when it names one)."""
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
    module = COMMANDS.get(_command(argv) or "") if argv is not None else None
    for name in (module,) if module else SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _stderr_logger(*_: object) -> Any:
    """A logger on the stderr of the moment (not the one at start: tests replace it)."""
    return importlib.import_module("structlog").PrintLogger(file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # Log lines (the watches' warnings that `explain` and `what-if` share with the operator)
    # go to stderr: stdout is the command's answer, `--json` included. `atoll run` sets up
    # its own logging. (structlog is imported here, after the command's module: `atoll run`'s
    # keeps rich out of it.)
    importlib.import_module("structlog").configure(logger_factory=_stderr_logger)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

"""How a command reports bad input: one line on stderr, `atoll COMMAND: what is wrong`, and
an exit code (2 for a usage error: a bad option, file or object the user gave)."""

from __future__ import annotations

import sys

USAGE = 2
"""Exit code of a usage error, as argparse uses it."""
FAILED = 1
"""Exit code of a command that could not do its work for another reason."""


def complain(command: str, problem: object, code: int = USAGE) -> int:
    """Print `atoll COMMAND: PROBLEM` (never wrapped, never styled) and return `code`."""
    print(f"atoll {command}: {problem}", file=sys.stderr)
    return code

"""`atoll run` imports only what the operator uses: the command line names one command, and
only that command's module is imported (not the simulator's, the sandbox's or the tables'),
and structlog comes without rich."""

from __future__ import annotations

import subprocess
import sys

import pytest

from atoll.cli.main import COMMANDS, SUBCOMMANDS, build_parser

NOT_FOR_THE_OPERATOR = ("rich", "pygments", "cryptography", "cel_expr_python", "matplotlib")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys; {code}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_run_command_loads_neither_tables_nor_certificates_nor_the_simulator() -> None:
    loaded = _loaded_after("from atoll.cli.main import build_parser; build_parser(['run'])")
    assert "kopf" in loaded  # the operator is there
    assert loaded.isdisjoint(NOT_FOR_THE_OPERATOR), loaded & set(NOT_FOR_THE_OPERATOR)


def test_the_operator_module_loads_structlog_without_rich_and_rich_still_imports() -> None:
    code = (
        "import atoll.kube.operator, structlog.dev; assert structlog.dev.rich is None; "
        "import rich.console"
    )
    assert "rich" in _loaded_after(code)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_named_command_has_the_help_it_has_among_every_command(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    helps = []
    for parser in (build_parser([command]), build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        helps.append(capsys.readouterr().out)
    assert f"usage: atoll {command}" in helps[0]
    assert helps[0] == helps[1]


def test_every_command_module_is_in_the_table() -> None:
    assert set(COMMANDS.values()) == set(SUBCOMMANDS)

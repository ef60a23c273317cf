"""`atoll run` without usable credentials: one clear line and exit status 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube import connection
from tests.conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
    return subprocess.run(
        [sys.executable, "-m", "atoll", "run", "--no-leader-elect", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        pytest.param(None, "does not exist", id="missing"),
        pytest.param("", "no current-context", id="empty"),
        pytest.param("{{{ not yaml", "not valid YAML", id="garbage"),
        pytest.param("apiVersion: v1\nkind: Config\n", "no current-context", id="no-context"),
    ],
)
def test_unusable_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, says: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)

    done = _run("--kubeconfig", str(path))

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]
    assert str(path) in lines[0]


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        pytest.param(404, "are the CRDs installed?", id="missing-crd"),
        pytest.param(403, "RBAC", id="forbidden"),
        pytest.param(400, "", id="other"),
    ],
)
def test_a_refusal_at_start_is_one_line_with_a_hint(status: int, hint: str) -> None:
    error = connection.refused(ApiException(status=status, reason="Nope"))

    assert str(error).startswith(f"the API server refused a request: {status} Nope")
    assert hint in str(error)
    assert "\n" not in str(error)

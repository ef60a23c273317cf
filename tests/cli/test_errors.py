"""Bad input gets one line naming what is wrong and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from atoll.cli.main import main
from tests.sim.builders import job

REPO = Path(__file__).resolve().parents[2]
DEADLOCK = str(REPO / "examples" / "scenarios" / "deadlock.yaml")


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err.strip()


def test_a_scenario_whose_top_level_is_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- apiVersion: v1\n  kind: Node\n")
    assert main(["simulate", str(bad)]) == 2
    assert _err(capsys) == (
        f"atoll simulate: {bad}: document 1: the top level is a list, not a Kubernetes "
        "object (a mapping with apiVersion, kind and metadata)"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("- a\n- b\n", "document 1: the top level is a list", id="list"),
        pytest.param("just words\n", "document 1: the top level is a str", id="scalar"),
        pytest.param("kind: Job\n  bad: [\n", "cannot read the Job:", id="not-yaml"),
        pytest.param(
            yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
            "document 1 (Node n): not a batch/v1 Job",
            id="not-a-job",
        ),
    ],
)
def test_a_bad_job_file_for_what_if(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text(text)
    assert main(["what-if", str(bad), "--scenario", DEADLOCK]) == 2
    assert _err(capsys).startswith(f"atoll what-if: {bad}: {problem}")


def _job_file(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job("j")))
    return str(path)


KUBECONFIGS = [
    pytest.param(None, "does not exist: give --kubeconfig FILE or set KUBECONFIG", id="missing"),
    pytest.param("foo: [\n", "not valid YAML at line 2", id="not-yaml"),
    pytest.param("- a\n", "the top level is a list, not a mapping", id="list"),
    pytest.param("garbage\n", "the top level is a str, not a mapping", id="scalar"),
    pytest.param("apiVersion: v1\nkind: Config\n", "no current-context set", id="no-context"),
]


@pytest.mark.parametrize(("text", "problem"), KUBECONFIGS)
@pytest.mark.parametrize("command", ["explain", "what-if", "run"])
def test_a_missing_or_garbage_kubeconfig(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    text: str | None,
    problem: str,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if text is not None:
        kubeconfig.write_text(text)
    target = {"explain": ["ns/job"], "what-if": [_job_file(tmp_path)], "run": []}[command]
    assert main([command, *target, "--kubeconfig", str(kubeconfig)]) == 2
    expected = f"atoll {command}: kubeconfig {kubeconfig}: {problem}"
    assert _err(capsys).startswith(
        expected.replace(f"{kubeconfig}: does", f"{kubeconfig} (--kubeconfig) does")
    )


def test_no_kubeconfig_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["explain", "ns/job"]) == 2
    assert _err(capsys) == (
        f"atoll explain: kubeconfig {tmp_path}/.kube/config (the default) does not exist: "
        "give --kubeconfig FILE or set KUBECONFIG"
    )

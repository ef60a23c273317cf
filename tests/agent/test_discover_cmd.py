"""`atoll topology discover --from-fixture`: what it prints, its exit codes, and that nothing is
published from malformed output or without --publish."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from atoll.cli.main import main
from atoll.kube import nodelabels
from tests.conftest import REPO

FIXTURES = REPO / "examples" / "nvidia-smi"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    calls: list[tuple[str, dict[str, str], dict[str, str]]] = []

    async def fake(
        _kubeconfig: Path | None, node: str, labels: Mapping[str, str], ann: Mapping[str, str]
    ) -> None:
        calls.append((node, dict(labels), dict(ann)))

    monkeypatch.setattr(nodelabels, "publish", fake)
    return calls


def test_prints_islands_and_publishes_nothing_by_default(
    capsys: pytest.CaptureFixture[str], published: list[object]
) -> None:
    assert (
        main(["topology", "discover", "--from-fixture", str(FIXTURES / "rtx-a6000-2-pairs.txt")])
        == 0
    )
    out = capsys.readouterr().out
    assert "4 GPU(s) in 2 NVLink island(s) of 2, 2" in out
    assert "island 0: GPUs 0,1 (2), NV4" in out
    assert "island 1: GPUs 2,3 (2), NV4" in out
    assert published == []


def test_publish_writes_labels_and_the_annotation(
    capsys: pytest.CaptureFixture[str], published: list[tuple[str, dict[str, str], dict[str, str]]]
) -> None:
    argv = ["topology", "discover", "--from-fixture", str(FIXTURES / "dgx-h100.txt")]
    assert main([*argv, "--publish", "--node", "n1", "--json"]) == 0
    [(node, labels, ann)] = published
    assert node == "n1"
    assert labels == {"atoll.dev/nvlink-island-max": "8", "atoll.dev/nvlink-island-sizes": "8"}
    doc = json.loads(ann["atoll.dev/nvlink-islands"])
    assert [g["index"] for g in doc["islands"][0]["gpus"]] == list(range(8))
    assert doc["islands"][0]["nvlinks"] == 18
    assert json.loads(capsys.readouterr().out)["labels"] == labels


def test_malformed_output_exits_2_and_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], published: list[object]
) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n")
    code = main(["topology", "discover", "--from-fixture", str(bad), "--publish", "--node", "n1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "line 3: GPU1 to GPU0 is NV2 but GPU0 to GPU1 is NV4; nothing published" in err
    assert published == []


def test_publish_without_a_node_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], published: list[object]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    fixture = str(FIXTURES / "lab-2x3090.txt")
    assert main(["topology", "discover", "--from-fixture", fixture, "--publish"]) == 2
    assert "--publish needs --node NAME" in capsys.readouterr().err
    assert published == []


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "discover", "--from-fixture", str(tmp_path / "nope.txt")]) == 2
    assert "cannot read" in capsys.readouterr().err

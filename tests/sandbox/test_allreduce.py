"""The sandbox's all-reduce model on a fake kubectl: a gang's pods finish only once all of
them ran together long enough; a JobSet's pods (of several child Jobs) are one gang."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest

from atoll.sandbox.allreduce import ANNOTATION, JOB_NAME_LABEL, JOBSET_NAME_LABEL, AllReduceAgent


def pod(name: str, job: str, *, jobset: str | None, running: bool, size: int) -> dict[str, Any]:
    labels = {JOB_NAME_LABEL: job}
    if jobset is not None:
        labels[JOBSET_NAME_LABEL] = jobset
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels,
            "annotations": {ANNOTATION: "2", "atoll.dev/gang-size": str(size)},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running" if running else "Pending"},
    }


@dataclass
class FakeKubectl:
    pods: list[dict[str, Any]]
    patched: list[str] = field(default_factory=list)

    def __call__(self, *args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("get", "pods"):
            out = json.dumps({"items": self.pods})
            return subprocess.CompletedProcess(list(args), 0, out, "")
        if args[0] == "patch":
            self.patched.append(args[2])
        return subprocess.CompletedProcess(list(args), 0, "", "")


def _jobset_pods(running_workers: int) -> list[dict[str, Any]]:
    leader = pod("a-leader-0", "a-leader-0", jobset="a", running=True, size=4)
    workers = [
        pod(f"a-workers-{i}", f"a-workers-{i}", jobset="a", running=i < running_workers, size=4)
        for i in range(3)
    ]
    return [leader, *workers]


@pytest.mark.parametrize(
    ("running_workers", "finished"),
    [
        pytest.param(3, ["a-leader-0", "a-workers-0", "a-workers-1", "a-workers-2"], id="all"),
        pytest.param(2, [], id="one-not-running"),
    ],
)
def test_a_jobsets_pods_finish_together_only_once_all_ran_long_enough(
    running_workers: int, finished: list[str]
) -> None:
    now = [0.0]
    kubectl = FakeKubectl(_jobset_pods(running_workers=running_workers))
    agent = AllReduceAgent(kubectl=kubectl, clock=lambda: now[0])
    agent.step()
    now[0] = 60.0
    agent.step()
    assert sorted(kubectl.patched) == finished
    assert agent.completed == ([("ns", "a")] if finished else [])

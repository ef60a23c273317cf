"""A model of all-reduce for the sandbox: a pod annotated `atoll.dev/allreduce-seconds: "D"`
finishes only after every pod of its gang (its JobSet when it belongs to one, else its Job;
`atoll.dev/gang-size` pods) has been Running together for D seconds. Until then it holds its
GPUs and makes no progress, as a real data-parallel training step blocked in a collective
would. KWOK leaves these pods to us.

The agent polls with kubectl (the sandbox layer talks to the cluster only through kubectl),
so it works on any cluster the caller's kubectl reaches.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ANNOTATION = "atoll.dev/allreduce-seconds"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(slots=True)
class GangProgress:
    size: int
    seconds: float
    together_since: float | None = None
    done: bool = False


def _finished_status(pod: dict[str, Any]) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "phase": "Succeeded",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodCompleted",
                    "lastTransitionTime": now,
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "reason": "PodCompleted",
                    "lastTransitionTime": now,
                },
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
                for c in pod["spec"]["containers"]
            ],
        }
    }


@dataclass(slots=True)
class AllReduceAgent:
    """Completes gangs whose pods all ran together long enough; `step` does one poll."""

    kubectl: Kubectl
    clock: Callable[[], float] = time.monotonic
    gangs: dict[tuple[str, str], GangProgress] = field(default_factory=dict)
    completed: list[tuple[str, str]] = field(default_factory=list)

    def step(self) -> None:
        raw = self.kubectl("get", "pods", "-A", "-o", "json", check=False)
        if raw.returncode != 0:
            return
        by_gang: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in json.loads(raw.stdout)["items"]:
            meta = pod["metadata"]
            seconds = (meta.get("annotations") or {}).get(ANNOTATION)
            labels = meta.get("labels") or {}
            job = labels.get(JOBSET_NAME_LABEL) or labels.get(JOB_NAME_LABEL)
            if seconds is None or job is None or meta.get("deletionTimestamp"):
                continue
            key = (meta["namespace"], job)
            by_gang.setdefault(key, []).append(pod)
            if key not in self.gangs:
                size = int((meta.get("annotations") or {}).get("atoll.dev/gang-size", "0"))
                self.gangs[key] = GangProgress(size=size, seconds=float(seconds))
        now = self.clock()
        for key, pods in by_gang.items():
            gang = self.gangs[key]
            if gang.done:
                continue
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            if len(running) < max(gang.size, 1):
                gang.together_since = None
                continue
            if gang.together_since is None:
                gang.together_since = now
            if now - gang.together_since >= gang.seconds:
                for pod in running:
                    self.kubectl(
                        "patch",
                        "pod",
                        pod["metadata"]["name"],
                        "-n",
                        key[0],
                        "--subresource=status",
                        "--type=merge",
                        "-p",
                        json.dumps(_finished_status(pod)),
                        check=False,
                    )
                gang.done = True
                self.completed.append(key)

    def run_in_thread(self, stop: threading.Event, interval: float = 0.5) -> threading.Thread:
        def loop() -> None:
            while not stop.is_set():
                self.step()
                stop.wait(interval)

        thread = threading.Thread(target=loop, name="allreduce-agent", daemon=True)
        thread.start()
        return thread

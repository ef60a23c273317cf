"""Invariants checked on every event of a pod watch (and a Workload watch) of one namespace,
not by sampling: `kubectl get --watch` streams the objects, each event updates what is bound
where, and the checks run on the state after it.

- GPUs of bound, live pods never exceed the quota;
- no gang is split: no pod of a Job is Unschedulable while another pod of it is bound;
- a pod counts as unadmitted when it is bound while its Job has more bound pods than its
  Workload's admission counts (a Job without an admitted Workload counts 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from tests.conftest import KubeCluster
from tests.kube.builders import GPU

_TERMINAL = ("Succeeded", "Failed")


@dataclass
class _PodState:
    job: str
    gpus: int
    node: str | None
    live: bool
    unschedulable: bool


def _gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod["spec"].get("containers") or []:
        total += int(((c.get("resources") or {}).get("requests") or {}).get(GPU, "0"))
    return total


def _pod_state(pod: dict[str, Any]) -> _PodState:
    meta, status = pod["metadata"], pod.get("status") or {}
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
    return _PodState(
        job=(meta.get("labels") or {}).get("batch.kubernetes.io/job-name", ""),
        gpus=_gpus(pod),
        node=pod["spec"].get("nodeName"),
        live=status.get("phase") not in _TERMINAL and not meta.get("deletionTimestamp"),
        unschedulable=unschedulable,
    )


def _admitted_count(wl: dict[str, Any]) -> int:
    status = wl.get("status") or {}
    reserved = any(
        c["type"] == "QuotaReserved" and c["status"] == "True"
        for c in status.get("conditions") or []
    )
    finished = any(
        c["type"] == "Finished" and c["status"] == "True" for c in status.get("conditions") or []
    )
    if not reserved or finished or not status.get("admission"):
        return 0
    return sum(int(a.get("count") or 0) for a in status["admission"]["podSetAssignments"])


def _objects(stream: IO[str]) -> Iterator[dict[str, Any]]:
    """Concatenated JSON documents, as `kubectl get --watch -o json` prints them."""
    decoder = json.JSONDecoder()
    buffer = ""
    for line in stream:
        buffer += line
        while True:
            stripped = buffer.lstrip()
            if not stripped:
                buffer = ""
                break
            try:
                obj, end = decoder.raw_decode(stripped)
            except json.JSONDecodeError:
                break
            buffer = stripped[end:]
            yield obj


@dataclass
class Invariants:
    """What the watch saw, for the assertions and the numbers a test prints."""

    quota: int
    max_gpus: int = 0
    over_quota: list[str] = field(default_factory=list)
    split_gangs: list[str] = field(default_factory=list)
    unadmitted: set[str] = field(default_factory=set)
    events: int = 0


class ClusterWatch:
    """Watch pods and Workloads of `namespace`; check `Invariants` on every event."""

    def __init__(self, cluster: KubeCluster, namespace: str, *, quota: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.seen = Invariants(quota=quota)
        self._pods: dict[str, _PodState] = {}
        self._admitted: dict[str, int] = {}
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[str]] = []
        self._threads: list[threading.Thread] = []
        self._started = {"pods": threading.Event(), "workloads": threading.Event()}

    def __enter__(self) -> ClusterWatch:
        self._follow("pods", self._on_pod)
        self._follow("workloads", self._on_workload)
        for kind, ready in self._started.items():
            assert ready.wait(30), f"the {kind} watch did not start"
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self._procs:
            proc.terminate()
            proc.wait(timeout=10)
        for t in self._threads:
            t.join(timeout=10)

    def _follow(self, kind: str, on: Callable[[str, dict[str, Any]], None]) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        proc = subprocess.Popen(
            [
                self.cluster.kubectl_path,
                "get",
                kind,
                "-n",
                self.namespace,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self._procs.append(proc)
        started = self._started[kind]

        def read() -> None:
            assert proc.stdout is not None
            started.set()  # kubectl lists what exists first, then follows
            for event in _objects(proc.stdout):
                on(str(event.get("type")), event["object"])

        t = threading.Thread(target=read, daemon=True)
        t.start()
        self._threads.append(t)

    def _on_workload(self, type_: str, wl: dict[str, Any]) -> None:
        owner = next(
            (r["name"] for r in wl["metadata"].get("ownerReferences") or [] if r["kind"] == "Job"),
            "",
        )
        with self._lock:
            self._admitted[owner] = 0 if type_ == "DELETED" else _admitted_count(wl)

    def _on_pod(self, type_: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if type_ == "DELETED":
                self._pods.pop(name, None)
            else:
                self._pods[name] = _pod_state(pod)
            self.seen.events += 1
            self._check()

    def _check(self) -> None:
        bound = {n: p for n, p in self._pods.items() if p.live and p.node}
        gpus = sum(p.gpus for p in bound.values())
        self.seen.max_gpus = max(self.seen.max_gpus, gpus)
        if gpus > self.seen.quota:
            self.seen.over_quota.append(f"{gpus} GPUs bound > {self.seen.quota}")
        by_job: dict[str, list[str]] = {}
        for n, p in bound.items():
            by_job.setdefault(p.job, []).append(n)
        for job, names in by_job.items():
            if len(names) > self._admitted.get(job, 0):
                self.seen.unadmitted.update(names[self._admitted.get(job, 0) :])
            stuck = [
                n for n, p in self._pods.items() if p.job == job and p.live and p.unschedulable
            ]
            if stuck:
                self.seen.split_gangs.append(f"job {job}: {names} bound, {stuck} unschedulable")

    def report(self, edit: str, recovered_s: float) -> str:
        """One line for the lead's note: the time to recover and the pods that ran
        unadmitted."""
        line = (
            f"[user-edit] {edit}: recovered in {recovered_s:.1f}s, "
            f"{len(self.seen.unadmitted)} pods ran unadmitted, max {self.seen.max_gpus} of "
            f"{self.seen.quota} GPUs bound, {self.seen.events} pod events"
        )
        print(line)
        return line

    def assert_held(self, *, unadmitted: int = 0) -> None:
        with self._lock:
            assert self.seen.over_quota == [], self.seen.over_quota[:5]
            assert self.seen.split_gangs == [], self.seen.split_gangs[:5]
            assert len(self.seen.unadmitted) <= unadmitted, sorted(self.seen.unadmitted)


def timed(what: str, cluster: KubeCluster, check: Callable[[], object], timeout: float) -> float:
    """`cluster.wait_for`, returning how long it took (seconds)."""
    start = time.monotonic()
    cluster.wait_for(what, check, timeout=timeout)
    return time.monotonic() - start

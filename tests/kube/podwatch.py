"""A pod watch for fault tests: every pod event of one namespace, as it happens, checked
against the admission invariants (not sampled). It survives API-server restarts: when the
`kubectl --watch` ends it is started again, and its initial list replays the current pods.

Invariants, at every event:
- the GPUs requested by pods bound to a node and not finished never exceed the quota;
- a bound pod carries the `kueue.x-k8s.io/podset` label atoll injects when it starts an
  admitted Job; one without it ran unadmitted (counted, with when it was first seen);
- per Job, the largest number of its pods bound at once (a gang is whole when that is the
  Job's parallelism).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import KubeCluster
from tests.kube.builders import GPU

PODSET_LABEL = "kueue.x-k8s.io/podset"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DONE = ("Succeeded", "Failed")


@dataclass(slots=True)
class PodState:
    job: str
    gpus: int
    bound: bool
    admitted: bool


@dataclass(slots=True)
class Record:
    max_gpus: int = 0
    over_quota: list[str] = field(default_factory=list)
    unadmitted: dict[str, float] = field(default_factory=dict)
    """Pods that were bound without atoll's admission label, and when first seen."""
    max_bound: dict[str, int] = field(default_factory=dict)
    """Per Job, the most pods bound at the same time."""
    added: list[tuple[float, str]] = field(default_factory=list)
    """(monotonic time, pod) of every pod, when the watch first saw it."""


class PodWatch:
    """Start with `start()`, stop with `stop()` (it kills only the kubectl it started)."""

    def __init__(self, cluster: KubeCluster, namespace: str, quota_gpus: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.quota = quota_gpus
        self.record = Record()
        self._pods: dict[str, PodState] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.restarts = 0

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
        self._thread.join(timeout=15)

    def first_added_after(self, t: float) -> float | None:
        """Seconds from `t` to the first pod created after it (None: none yet)."""
        with self._lock:
            after = [at for at, _ in self.record.added if at >= t]
        return min(after) - t if after else None

    def bound_of(self, job: str, *, admitted: bool) -> int:
        """Pods of `job` bound now, with (or without) atoll's admission label."""
        with self._lock:
            return sum(
                1
                for p in self._pods.values()
                if p.job == job and p.bound and p.admitted == admitted
            )

    def bound_unadmitted(self) -> list[str]:
        """Pods bound now without atoll's admission label."""
        with self._lock:
            return sorted(name for name, p in self._pods.items() if p.bound and not p.admitted)

    # -- the watch thread -----------------------------------------------------------------
    def _run(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        argv = [
            self.cluster.kubectl_path,
            "get",
            "pods",
            "-n",
            self.namespace,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
            "--request-timeout=0",
        ]
        while not self._stopping.is_set():
            with self._lock:
                self._pods.clear()  # the new watch's initial list says what exists now
            self._proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
            )
            assert self._proc.stdout is not None
            decoder = json.JSONDecoder()
            buffer = ""
            for chunk in iter(lambda: self._proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                buffer += chunk.decode()
                while True:
                    buffer = buffer.lstrip()
                    if not buffer:
                        break
                    try:
                        event, end = decoder.raw_decode(buffer)
                    except ValueError:
                        break
                    buffer = buffer[end:]
                    self._on_event(event)
            self._proc.wait()
            if not self._stopping.is_set():
                self.restarts += 1
                self._stopping.wait(0.5)

    def _on_event(self, event: dict[str, Any]) -> None:
        pod = event.get("object") or {}
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        now = time.monotonic()
        with self._lock:
            if event.get("type") == "DELETED":
                self._pods.pop(name, None)
                return
            labels = meta.get("labels") or {}
            spec = pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase")
            gpus = sum(
                int((c.get("resources") or {}).get("requests", {}).get(GPU, 0))
                for c in spec.get("containers") or ()
            )
            if name not in self._seen:
                self._seen.add(name)
                self.record.added.append((now, name))
            state = PodState(
                job=str(labels.get(JOB_NAME_LABEL, "")),
                gpus=gpus,
                bound=bool(spec.get("nodeName")) and phase not in DONE,
                admitted=PODSET_LABEL in labels,
            )
            self._pods[name] = state
            if state.bound and not state.admitted:
                self.record.unadmitted.setdefault(name, now)
            used = sum(p.gpus for p in self._pods.values() if p.bound)
            self.record.max_gpus = max(self.record.max_gpus, used)
            if used > self.quota:
                self.record.over_quota.append(f"{used} GPUs bound > quota {self.quota}")
            bound_of_job = sum(1 for p in self._pods.values() if p.bound and p.job == state.job)
            known = self.record.max_bound.get(state.job, 0)
            self.record.max_bound[state.job] = max(known, bound_of_job)

"""Watches for cluster tests that check the admission invariants on every event, not by
sampling: `kubectl get KIND --watch -o json` streams the objects of one namespace, each event
updates what is bound where, and the checks run on the state after it.

- `PodWatch` (fault tests): survives API-server restarts (the watch is started again and its
  initial list replays the current pods). At every event: the GPUs of bound, unfinished pods
  never exceed the quota; a bound pod without the `kueue.x-k8s.io/podset` label atoll injects
  when it starts an admitted Job ran unadmitted; per Job, the most pods bound at once (a gang
  is whole when that is the Job's parallelism).
- `ClusterWatch` (user-edit tests): pods and Workloads. At every pod event: the GPUs of bound,
  live pods never exceed the quota; no gang is split (no pod of a Job is Unschedulable while
  another pod of it is bound); a pod counts as unadmitted when it is bound while its Job has
  more bound pods than its Workload's admission counts (no admitted Workload counts 0), unless
  the Workload watch, running behind the pod watch, then shows an admission counting them
  that was made before the pod was bound (its QuotaReserved transition time no later than the
  pod's PodScheduled one, both the API server's, in whole seconds: a pod bound in the second
  of its admission but before it would pass unseen).
"""

from __future__ import annotations

import datetime as dt
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

PODSET_LABEL = "kueue.x-k8s.io/podset"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
_TERMINAL = ("Succeeded", "Failed")

OnEvent = Callable[[str, dict[str, Any]], None]


def _objects(stream: IO[bytes]) -> Iterator[dict[str, Any]]:
    """Concatenated JSON documents, as `kubectl get --watch -o json` prints them."""
    decoder = json.JSONDecoder()
    buffer = ""
    for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
        buffer += chunk.decode()
        while True:
            buffer = buffer.lstrip()
            if not buffer:
                break
            try:
                obj, end = decoder.raw_decode(buffer)
            except ValueError:
                break
            buffer = buffer[end:]
            yield obj


class Follow:
    """One `kubectl get KIND -n NAMESPACE --watch` in a thread, each event passed to `on`.
    When kubectl ends (the API server went away) it is started again after `on_restart()`;
    `stop()` kills only the kubectl it started."""

    def __init__(
        self,
        cluster: KubeCluster,
        kind: str,
        namespace: str,
        on: OnEvent,
        on_restart: Callable[[], None] = lambda: None,
    ) -> None:
        self.argv = [
            cluster.kubectl_path,
            *("get", kind, "-n", namespace, "--watch", "--output-watch-events"),
            *("-o", "json", "--request-timeout=0"),
        ]
        self.env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
        self.on = on
        self.on_restart = on_restart
        self.started = threading.Event()
        self.restarts = 0
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.on_restart()  # the new watch's initial list says what exists now
            proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env
            )
            self._proc = proc
            self.started.set()  # kubectl lists what exists first, then follows
            assert proc.stdout is not None
            for event in _objects(proc.stdout):
                self.on(str(event.get("type")), event.get("object") or {})
            proc.wait()
            if not self._stopping.is_set():
                self.restarts += 1
                self._stopping.wait(0.5)


@dataclass(slots=True)
class PodState:
    job: str
    gpus: int
    node: str | None
    finished: bool
    deleting: bool
    unschedulable: bool
    admitted: bool
    """It carries the podset label atoll injects when it starts an admitted Job."""
    scheduled_at: float = 0.0
    """When it was bound (its PodScheduled transition, the API server's clock; without
    one, when the watch saw it)."""

    @property
    def bound(self) -> bool:
        """On a node and not finished (it holds its GPUs)."""
        return bool(self.node) and not self.finished


def pod_state(pod: dict[str, Any]) -> PodState:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    return PodState(
        job=str(labels.get(JOB_NAME_LABEL, "")),
        gpus=sum(
            int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
            for c in spec.get("containers") or ()
        ),
        node=spec.get("nodeName"),
        finished=status.get("phase") in _TERMINAL,
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in status.get("conditions") or ()
        ),
        admitted=PODSET_LABEL in labels,
        scheduled_at=_transition(pod, "PodScheduled") or time.time(),
    )


# -- the fault tests' pod watch ------------------------------------------------------------
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
    """Start with `start()`, stop with `stop()` (or use it as a context manager)."""

    def __init__(self, cluster: KubeCluster, namespace: str, quota_gpus: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.quota = quota_gpus
        self.record = Record()
        self._pods: dict[str, PodState] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._follow: Follow | None = None

    def start(self) -> PodWatch:
        self._follow = Follow(self.cluster, "pods", self.namespace, self._on_event, self._clear)
        return self

    def __enter__(self) -> PodWatch:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def numbers(self) -> dict[str, object]:
        """What every fault test reports: pods that ran unadmitted, the most GPUs bound."""
        return {
            "unadmitted_pods": len(self.record.unadmitted),
            "max_gpus": self.record.max_gpus,
            "quota": self.quota,
        }

    def stop(self) -> None:
        if self._follow is not None:
            self._follow.stop()

    @property
    def restarts(self) -> int:
        return self._follow.restarts if self._follow is not None else 0

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

    def _clear(self) -> None:
        with self._lock:
            self._pods.clear()

    def _on_event(self, type_: str, pod: dict[str, Any]) -> None:
        name = str((pod.get("metadata") or {}).get("name", ""))
        now = time.monotonic()
        with self._lock:
            if type_ == "DELETED":
                self._pods.pop(name, None)
                return
            if name not in self._seen:
                self._seen.add(name)
                self.record.added.append((now, name))
            state = self._pods[name] = pod_state(pod)
            if state.bound and not state.admitted:
                self.record.unadmitted.setdefault(name, now)
            used = sum(p.gpus for p in self._pods.values() if p.bound)
            self.record.max_gpus = max(self.record.max_gpus, used)
            if used > self.quota:
                self.record.over_quota.append(f"{used} GPUs bound > quota {self.quota}")
            bound_of_job = sum(1 for p in self._pods.values() if p.bound and p.job == state.job)
            known = self.record.max_bound.get(state.job, 0)
            self.record.max_bound[state.job] = max(known, bound_of_job)


# -- the user-edit tests' pod and Workload watch ----------------------------------------------
def _transition(obj: dict[str, Any], type_: str) -> float | None:
    """When the object's condition `type_` became True (epoch seconds, the API server's
    clock in whole seconds), if it is True."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_ and c["status"] == "True" and c.get("lastTransitionTime"):
            stamp = dt.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
            return stamp.replace(tzinfo=dt.UTC).timestamp()
    return None


def _reserved_since(wl: dict[str, Any]) -> float | None:
    """When the Workload's QuotaReserved became True."""
    return _transition(wl, "QuotaReserved")


def _admitted_count(wl: dict[str, Any]) -> int:
    status = wl.get("status") or {}
    conditions = status.get("conditions") or []
    reserved = any(c["type"] == "QuotaReserved" and c["status"] == "True" for c in conditions)
    finished = any(c["type"] == "Finished" and c["status"] == "True" for c in conditions)
    if not reserved or finished or not status.get("admission"):
        return 0
    return sum(int(a.get("count") or 0) for a in status["admission"]["podSetAssignments"])


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
    """Watch pods and Workloads of `namespace`; check `Invariants` on every pod event."""

    def __init__(self, cluster: KubeCluster, namespace: str, *, quota: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.seen = Invariants(quota=quota)
        self._pods: dict[str, PodState] = {}
        self._admitted: dict[str, int] = {}
        self._suspects: dict[str, tuple[str, float, int]] = {}
        """Pods seen bound beyond their Job's admitted count: pod → (Job, when it was bound
        (its PodScheduled transition, epoch seconds), how many of the Job's pods were bound
        then)."""
        self._lock = threading.Lock()
        self._follows: list[Follow] = []

    def __enter__(self) -> ClusterWatch:
        for kind, on, known in (
            ("pods", self._on_pod, self._pods),
            ("workloads", self._on_workload, self._admitted),
        ):
            follow = Follow(self.cluster, kind, self.namespace, on, known.clear)
            self._follows.append(follow)
            assert follow.started.wait(30), f"the {kind} watch did not start"
        return self

    def __exit__(self, *_: object) -> None:
        for follow in self._follows:
            follow.stop()

    def _on_workload(self, type_: str, wl: dict[str, Any]) -> None:
        owners = wl["metadata"].get("ownerReferences") or []
        owner = next((r["name"] for r in owners if r["kind"] == "Job"), "")
        with self._lock:
            count = self._admitted[owner] = 0 if type_ == "DELETED" else _admitted_count(wl)
            since = _reserved_since(wl) if count else None
            if since is None:
                return
            for pod, (job, bound_at, bound) in list(self._suspects.items()):
                # the admission counted them and came first: this watch was only late
                if job == owner and count >= bound and since <= bound_at:
                    del self._suspects[pod]

    def _on_pod(self, type_: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if type_ == "DELETED":
                self._pods.pop(name, None)
            else:
                self._pods[name] = pod_state(pod)
            self.seen.events += 1
            self._check()

    def _check(self) -> None:
        live = {n: p for n, p in self._pods.items() if not p.finished and not p.deleting}
        bound = {n: p for n, p in live.items() if p.node}
        gpus = sum(p.gpus for p in bound.values())
        self.seen.max_gpus = max(self.seen.max_gpus, gpus)
        if gpus > self.seen.quota:
            self.seen.over_quota.append(f"{gpus} GPUs bound > {self.seen.quota}")
        by_job: dict[str, list[str]] = {}
        for n, p in bound.items():
            by_job.setdefault(p.job, []).append(n)
        for job, names in by_job.items():
            admitted = self._admitted.get(job, 0)
            if len(names) > admitted:
                for n in names[admitted:]:
                    self._suspects.setdefault(n, (job, bound[n].scheduled_at, len(names)))
            stuck = [n for n, p in live.items() if p.job == job and p.unschedulable]
            if stuck:
                self.seen.split_gangs.append(f"job {job}: {names} bound, {stuck} unschedulable")

    def _settle(self) -> None:
        """The suspects no later admission explained ran unadmitted."""
        self.seen.unadmitted.update(self._suspects)

    def report(self, edit: str, recovered_s: float) -> str:
        """One line for the lead's note: the time to recover and the pods that ran
        unadmitted."""
        with self._lock:
            self._settle()
        line = (
            f"[user-edit] {edit}: recovered in {recovered_s:.1f}s, "
            f"{len(self.seen.unadmitted)} pods ran unadmitted, max {self.seen.max_gpus} of "
            f"{self.seen.quota} GPUs bound, {self.seen.events} pod events"
        )
        print(line)
        return line

    def assert_held(self, *, unadmitted: int = 0) -> None:
        with self._lock:
            self._settle()
            assert self.seen.over_quota == [], self.seen.over_quota[:5]
            assert self.seen.split_gangs == [], self.seen.split_gangs[:5]
            assert len(self.seen.unadmitted) <= unadmitted, sorted(self.seen.unadmitted)


def timed(what: str, cluster: KubeCluster, check: Callable[[], object], timeout: float) -> float:
    """`cluster.wait_for`, returning how long it took (seconds)."""
    start = time.monotonic()
    cluster.wait_for(what, check, timeout=timeout)
    return time.monotonic() - start

"""The custom owner kinds on the sandbox (JobSet, MPIJob; TrainJob in its test) as the
cluster tests read them: an owner's Workload, its pods and whether it is suspended; and the
checks every kind shares (admitted whole with no pod before the admission and a second one
waiting whole; preempted, suspended and its templates restored; left alone without a queue
label); and the operator that manages a kind (`operator_for`, one fixture factory for every
kind)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    create,
    get_json,
    is_true,
    replacing_operator,
)

PODSET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
Obj = dict[str, Any]


def _templates_carry(obj: Obj, templates: Iterable[Obj]) -> bool:
    del obj
    return any(
        WORKLOAD_ANNOTATION in (t.get("metadata", {}).get("annotations") or {}) for t in templates
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnerKind:
    kind: str
    resource: str
    """kubectl's name for it (`jobset`)."""
    name_label: str
    """Label on its pods naming the owner."""
    role_label: str
    """Label on its pods naming their replicated job / replica type."""
    suspend_path: tuple[str, ...]
    """Where `suspend` sits under `spec`."""
    templates: Callable[[Obj], Iterable[Obj]]
    """The pod templates of an object."""
    finished: str
    """Condition the owner's controller sets when it succeeded."""
    carries: Callable[[Obj, Iterable[Obj]], bool] = _templates_carry
    """Whether the object (with its pod templates) still carries what starting it wrote
    (default: a template's workload annotation; a TrainJob: its override index)."""

    def carries_admission(self, obj: Obj) -> bool:
        return self.carries(obj, list(self.templates(obj)))

    def get(self, cluster: KubeCluster, ns: str, name: str) -> Obj:
        got: Obj = get_json(cluster, "get", self.resource, name, "-n", ns)
        return got

    def suspended(self, cluster: KubeCluster, ns: str, name: str) -> bool:
        spec = self.get(cluster, ns, name)["spec"]
        for key in self.suspend_path:
            spec = spec.get(key) or {}
        return spec is True

    def workload_of(self, cluster: KubeCluster, ns: str, name: str) -> Obj | None:
        for wl in get_json(cluster, "get", "workloads", "-n", ns)["items"]:
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref["kind"] == self.kind and ref["name"] == name:
                    return dict(wl)
        return None

    def pods_of(self, cluster: KubeCluster, ns: str, name: str) -> list[Obj]:
        pods = get_json(cluster, "get", "pods", "-n", ns, "-l", f"{self.name_label}={name}")
        return list(pods["items"])

    def bound(self, cluster: KubeCluster, ns: str, name: str) -> dict[str, int]:
        """Bound pods by role."""
        out: dict[str, int] = {}
        for pod in self.pods_of(cluster, ns, name):
            if pod["spec"].get("nodeName"):
                role = pod["metadata"]["labels"][self.role_label]
                out[role] = out.get(role, 0) + 1
        return out


def _jobset_templates(obj: Obj) -> Iterable[Obj]:
    return [rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]]


def _mpijob_templates(obj: Obj) -> Iterable[Obj]:
    return [r["template"] for r in obj["spec"]["mpiReplicaSpecs"].values()]


JOBSET = OwnerKind(
    kind="JobSet",
    resource="jobset",
    name_label="jobset.sigs.k8s.io/jobset-name",
    role_label=PODSET_LABEL,
    suspend_path=("suspend",),
    templates=_jobset_templates,
    finished="Completed",
)
MPIJOB = OwnerKind(
    kind="MPIJob",
    resource="mpijob",
    name_label="training.kubeflow.org/job-name",
    role_label="training.kubeflow.org/job-role",
    suspend_path=("runPolicy", "suspend"),
    templates=_mpijob_templates,
    finished="Succeeded",
)


def owned_workloads(cluster: KubeCluster, kind: str) -> list[str]:
    """Workloads of any namespace whose owner is a `kind`."""
    return [
        wl["metadata"]["name"]
        for wl in get_json(cluster, "get", "workloads", "-A")["items"]
        if any(r["kind"] == kind for r in wl["metadata"].get("ownerReferences") or [])
    ]


FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "Pod": ("pod",),
    "JobSet": ("jobset.x-k8s.io/jobset",),
    "MPIJob": ("kubeflow.org/mpijob",),
    "TrainJob": ("jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/leaderworkerset",),
}
"""The `integrations.frameworks` (besides `batch/job`) an operator needs to manage a kind."""


def frameworks_setting(kind: str) -> str:
    """The `--set` value that enables the frameworks a `kind` needs (and `batch/job`)."""
    frameworks = ", ".join(f'"{f}"' for f in ("batch/job", *FRAMEWORKS[kind]))
    return f"integrations.frameworks=[{frameworks}]"


def operator_for(
    name: str, kind: str, *, needs: tuple[str, ...] = (), wait_gone: bool = True
) -> Any:
    """A module fixture `name`: `atoll run` with the frameworks of `kind` enabled, in place of the
    session's operator, started once the fixtures named in `needs` (the kind's controller,
    which installs its CRDs; the nodes) are up. Before it stops, unless not `wait_gone`, the
    Workloads owned by a `kind` must be gone (their namespaces deleted): the session's
    operator does not manage the kind, and those Workloads hold quota and topology domains
    while admitted."""
    setting = frameworks_setting(kind)

    @pytest.fixture(scope="module", name=name)
    def fixture(
        cluster: KubeCluster,
        operator: OperatorProcess,
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[OperatorProcess]:
        for needed in needs:
            request.getfixturevalue(needed)
        log_dir = tmp_path_factory.mktemp(f"{kind.lower()}-operator")
        with replacing_operator(cluster, operator, log_dir, "--set", setting) as op:
            yield op
            if not wait_gone:
                return
            try:
                cluster.wait_for(
                    f"the {kind}s' Workloads to be gone",
                    lambda: not owned_workloads(cluster, kind),
                    timeout=180,
                )
            except AssertionError as e:
                raise AssertionError(f"{e}: {_left(cluster, kind)}") from None

    return fixture


def _left(cluster: KubeCluster, kind: str) -> str:
    """The Workloads of `kind` still there: namespace, name, finalizers, deletion, conditions."""
    out = []
    for wl in get_json(cluster, "get", "workloads", "-A")["items"]:
        meta = wl["metadata"]
        if any(r["kind"] == kind for r in meta.get("ownerReferences") or []):
            conds = [
                f"{c['type']}={c['status']}({c.get('reason', '')})"
                for c in (wl.get("status") or {}).get("conditions") or []
            ]
            out.append(
                f"{meta['namespace']}/{meta['name']} finalizers={meta.get('finalizers')} "
                f"deleting={meta.get('deletionTimestamp')} {' '.join(conds)}"
            )
    return "; ".join(out)


def queue(
    cluster: KubeCluster, ns: str, gpus: int, node_labels: dict[str, str] | None = None, **cq: Any
) -> str:
    """Flavor `rf-NS` (with `node_labels`), ClusterQueue `cq-NS` of `gpus` GPUs, LocalQueue
    `q`, once atoll has made it Active; the CQ's name."""
    rf, cq_name = f"rf-{ns}", f"cq-{ns}"
    apply(
        cluster,
        b.flavor(rf, node_labels),
        b.cluster_queue(cq_name, rf, gpus=gpus, **cq),
        b.local_queue("q", ns, cq_name),
    )
    # Until atoll has the queue, a Workload waits as inadmissible and a later one may pass it
    # (as in Kueue): wait for the LocalQueue's Active condition, which atoll writes.
    cluster.wait_for(
        "the LocalQueue to be Active",
        lambda: is_true(get_json(cluster, "get", "localqueue", "q", "-n", ns), "Active"),
    )
    return cq_name


def check_first_admitted_whole_second_waits(
    cluster: KubeCluster,
    kind: OwnerKind,
    ns: str,
    *,
    cq: str,
    pod_sets: list[tuple[str, int]],
    first: Obj,
    second: Obj,
) -> Obj:
    """Creates `first` (named "first"); once it is admitted, creates `second` ("second"),
    which does not fit beside it. `first` is admitted whole (these pod sets), all its pods
    bound, ready (PodsReady) and none created before its admission; `second` waits whole,
    suspended, without a pod, saying which resource it lacks. The first's Workload.

    The second is created only after the first's admission: created together, their
    Workloads may get the same creation second, and then the queue orders them by UID (as
    Kueue does), so either could go first."""
    prefix = kind.kind.lower()
    assert create(cluster, first).returncode == 0
    cluster.wait_for(
        f"the first {kind.kind}'s Workload to be Admitted",
        lambda: is_true(kind.workload_of(cluster, ns, "first"), "Admitted"),
    )
    assert create(cluster, second).returncode == 0
    # The webhook suspends it at creation.
    assert kind.suspended(cluster, ns, "second")
    wl = kind.workload_of(cluster, ns, "first")
    assert wl is not None
    assert wl["metadata"]["name"].startswith(f"{prefix}-first-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == pod_sets
    assert [(a["name"], a["count"]) for a in wl["status"]["admission"]["podSetAssignments"]] == (
        pod_sets
    )
    total = sum(n for _, n in pod_sets)
    cluster.wait_for(
        f"the first {kind.kind}'s {total} pods to be bound",
        lambda: sum(kind.bound(cluster, ns, "first").values()) == total,
    )
    # its pods running and ready, as the kind's controller reports them: PodsReady (before
    # the 20 s PodsReady timeout would evict it)
    cluster.wait_for(
        f"the first {kind.kind}'s Workload to be PodsReady",
        lambda: is_true(kind.workload_of(cluster, ns, "first"), "PodsReady"),
    )
    pods = kind.pods_of(cluster, ns, "first")
    admitted_at = (condition(wl, "QuotaReserved") or {})["lastTransitionTime"]
    early = [
        p["metadata"]["name"] for p in pods if p["metadata"]["creationTimestamp"] < admitted_at
    ]
    assert early == [], f"pods created before the admission at {admitted_at}: {early}"
    assert {p["metadata"]["labels"][PODSET_LABEL] for p in pods} == {n for n, _ in pod_sets}
    assert all(p["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == cq for p in pods)
    cluster.wait_for(
        f"the second {kind.kind} to wait with a reason",
        lambda: (
            (condition(kind.workload_of(cluster, ns, "second"), "QuotaReserved") or {})
            .get("message", "")
            .startswith("couldn't assign flavors")
        ),
    )
    waiting = condition(kind.workload_of(cluster, ns, "second"), "QuotaReserved")
    assert waiting is not None
    assert waiting["status"] == "False"
    assert b.GPU in waiting["message"]
    assert any(ch.isdigit() for ch in waiting["message"])
    assert kind.pods_of(cluster, ns, "second") == []
    assert kind.suspended(cluster, ns, "second")
    table = cluster.kubectl("get", "workloads", "-n", ns).stdout
    assert f"{prefix}-first-" in table
    assert f"{prefix}-second-" in table
    return wl


def check_preempted_and_restored(
    cluster: KubeCluster,
    kind: OwnerKind,
    ns: str,
    *,
    low: Obj,
    roles: dict[str, int],
    started: Callable[[], None] | None = None,
) -> None:
    """`low` (a priority `low-NS` object of these bound roles) runs (and passes `started`); a
    high-priority Job
    preempts it: it is suspended, its pods go, its Workload says Preempted and its pod
    templates are restored as they were created."""
    name = low["metadata"]["name"]
    apply(cluster, b.priority_class(f"low-{ns}", 1), b.priority_class(f"high-{ns}", 100))
    create(cluster, low)
    cluster.wait_for(
        f"the low {kind.kind}'s pods to be bound",
        lambda: kind.bound(cluster, ns, name) == roles,
    )
    assert kind.carries_admission(kind.get(cluster, ns, name))
    if started is not None:
        started()  # the kind's own checks of the running object
    create(cluster, b.job("urgent", ns, queue="q", pods=2, gpus=8, priority=f"high-{ns}"))
    cluster.wait_for(
        f"the low {kind.kind} to be suspended and its pods to go",
        lambda: kind.suspended(cluster, ns, name) and kind.pods_of(cluster, ns, name) == [],
        timeout=90,
    )
    evicted = condition(kind.workload_of(cluster, ns, name), "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "Preempted"
    cluster.wait_for(
        f"the low {kind.kind} to be restored",
        lambda: not kind.carries_admission(kind.get(cluster, ns, name)),
    )
    for tmpl in kind.templates(kind.get(cluster, ns, name)):
        assert WORKLOAD_ANNOTATION not in (tmpl["metadata"].get("annotations") or {})
        assert PODSET_LABEL not in (tmpl["metadata"].get("labels") or {})


def check_left_alone(cluster: KubeCluster, kind: OwnerKind, ns: str, plain: Obj) -> None:
    """`plain` has no queue label: it is not suspended, runs to its end, has no Workload."""
    name = plain["metadata"]["name"]
    create(cluster, plain)
    assert not kind.suspended(cluster, ns, name)
    cluster.kubectl(
        "wait",
        f"--for=condition={kind.finished}",
        f"{kind.resource}/{name}",
        "-n",
        ns,
        "--timeout=120s",
        timeout=130,
    )
    assert kind.workload_of(cluster, ns, name) is None
    assert get_json(cluster, "get", "workloads", "-n", ns)["items"] == []

"""The generated CRDs on a real API server: they install, examples and Kueue-format manifests
apply, `kubectl get` shows Kueue's columns, and invalid objects are rejected naming the field.

Objects that are only validated are applied with `--dry-run=server` (full validation, nothing
stored), so these tests leave the shared sandbox as they found it. Objects that must exist
(columns, defaults, immutability) get unique names and are deleted afterwards.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.api import ClusterQueue, LocalQueue, ResourceFlavor, parse_object
from atoll.api.crdgen import KINDS
from tests.api.builders import (
    NOT_MANIFESTS,
    Manifest,
    admission_check,
    cluster_queue,
    cohort,
    cpu_group,
    flavor,
    group,
    local_queue,
    pod_set,
    priority_class,
    quota,
    resource_flavor,
    topology,
    without,
    workload,
)
from tests.conftest import KubeCluster
from tests.sandbox.test_integrations import (
    jobset_controller,
    lws_controller,
    mpi_controller,
    trainer_controller,
)

__all__ = ["jobset_controller", "lws_controller", "mpi_controller", "trainer_controller"]

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p
    for p in (REPO / "examples").rglob("*.yaml")
    if p.relative_to(REPO / "examples").parts[0] not in NOT_MANIFESTS
)


@pytest.fixture(scope="module")
def kube(cluster: KubeCluster) -> KubeCluster:
    cluster.apply_crds()
    return cluster


def _dry_run(kube: KubeCluster, *manifests: Manifest | str) -> Any:
    text = "\n---\n".join(m if isinstance(m, str) else yaml.safe_dump(m) for m in manifests)
    return kube.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=text, check=False
    )


@pytest.fixture
def created(kube: KubeCluster) -> Iterator[Callable[[Manifest], Manifest]]:
    """Create a manifest for real (under a unique name); everything is deleted afterwards."""
    made: list[Manifest] = []

    def create(manifest: Manifest) -> Manifest:
        manifest["metadata"]["name"] = f"{manifest['metadata']['name']}-{secrets.token_hex(3)}"
        kube.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest))
        made.append(manifest)
        return manifest

    yield create
    for manifest in reversed(made):
        kube.kubectl(
            "delete", "--wait=false", "-f", "-", input=yaml.safe_dump(manifest), check=False
        )


RESOURCES = {spec.kind: spec.name for spec in KINDS}


def _get(kube: KubeCluster, manifest: Manifest) -> dict[str, Any]:
    meta = manifest["metadata"]
    where = ("-n", meta["namespace"]) if "namespace" in meta else ()
    done = kube.kubectl("get", RESOURCES[manifest["kind"]], meta["name"], *where, "-o", "json")
    body: dict[str, Any] = json.loads(done.stdout)
    return body


# --- installation ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: s.plural)
def test_crd_is_established_storing_v1beta2_and_serving_v1beta1(
    kube: KubeCluster, spec: Any
) -> None:
    done = kube.kubectl("get", "crd", spec.name, "-o", "json")
    crd = json.loads(done.stdout)
    established = [c for c in crd["status"]["conditions"] if c["type"] == "Established"]
    assert established
    assert established[0]["status"] == "True"
    served = [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]]
    assert served == [("v1beta2", True, True)] + (
        [] if spec.kind == "Workload" else [("v1beta1", True, False)]
    )
    assert crd["status"]["storedVersions"] == ["v1beta2"]


def test_short_names_are_kueues_and_wl_is_not_one(kube: KubeCluster) -> None:
    done = kube.kubectl("api-resources", "--api-group=kueue.x-k8s.io", "-o", "wide")
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "kwl,kueueworkload,kueueworkloads" in rows["workloads"]
    assert "cq" in rows["clusterqueues"].split()
    assert "queue,queues,lq" in rows["localqueues"]
    assert " wl " not in f" {rows['workloads']} ".replace(",", " ")


# --- examples and Kueue's documented format -------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "examples")))
def test_example_applies(kube: KubeCluster, path: Path, request: pytest.FixtureRequest) -> None:
    if "kind: JobSet" in path.read_text():
        request.getfixturevalue("jobset_controller")  # installs the JobSet CRD
    if "kind: MPIJob" in path.read_text():
        request.getfixturevalue("mpi_controller")  # installs the MPIJob CRD
    if "trainer.kubeflow.org/" in path.read_text():
        request.getfixturevalue("trainer_controller")  # installs the Trainer CRDs
    if "kind: LeaderWorkerSet" in path.read_text():
        request.getfixturevalue("lws_controller")  # installs the LeaderWorkerSet CRD
    runtime = path.parent / "runtime.yaml"
    if "kind: TrainJob" in path.read_text() and runtime.exists():
        # Trainer's webhook admits a TrainJob only once its runtime exists.
        kube.kubectl("apply", "--server-side", "-f", str(runtime))
    try:
        done = kube.kubectl(
            "apply", "--server-side", "--dry-run=server", "-f", str(path), check=False
        )
    finally:
        if "kind: TrainJob" in path.read_text() and runtime.exists():
            kube.kubectl("delete", "-f", str(runtime), "--wait=false", check=False)
    assert done.returncode == 0, done.stderr


# A setup written by hand in the format Kueue's documentation uses for an admin's first queues.
KUEUE_DOCS_SETUP = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: "docs-flavor"
spec:
  nodeLabels:
    cloud.provider.com/instance: spot
  nodeTaints:
  - effect: NoSchedule
    key: spot
    value: "true"
  tolerations:
  - key: "spot-taint"
    operator: "Exists"
    effect: "NoSchedule"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: "docs-cluster-queue"
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: team-a
  queueingStrategy: BestEffortFIFO
  cohortName: "docs-cohort"
  resourceGroups:
  - coveredResources: ["cpu", "memory", "pods"]
    flavors:
    - name: "docs-flavor"
      resources:
      - name: "cpu"
        nominalQuota: 9
        borrowingLimit: 6
        lendingLimit: 3
      - name: "memory"
        nominalQuota: 36Gi
      - name: "pods"
        nominalQuota: 5
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: TryNextFlavor
  preemption:
    reclaimWithinCohort: Any
    borrowWithinCohort:
      policy: LowerPriority
      maxPriorityThreshold: 100
    withinClusterQueue: LowerPriority
  stopPolicy: None
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: "default"
  name: "docs-user-queue"
spec:
  clusterQueue: "docs-cluster-queue"
"""


def test_manifest_in_kueue_docs_format_applies_unchanged(kube: KubeCluster) -> None:
    done = _dry_run(kube, KUEUE_DOCS_SETUP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("serverside-applied") == 3


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param(cluster_queue("defaults"), id="clusterqueue"),
        pytest.param(local_queue("defaults"), id="localqueue"),
        pytest.param(resource_flavor("defaults", nodeLabels={"a": "b"}), id="resourceflavor"),
        pytest.param(cohort("defaults", parentName="root"), id="cohort"),
        pytest.param(workload("defaults", pod_sets=[{"template": {"spec": {}}}]), id="workload"),
    ],
)
def test_server_defaults_equal_model_defaults(
    kube: KubeCluster, created: Callable[[Manifest], Manifest], manifest: Manifest
) -> None:
    sent = created(manifest)
    stored = parse_object(_get(kube, sent))
    local = parse_object(sent)
    assert stored.model_dump()["spec"] == local.model_dump()["spec"]


def test_omitted_namespace_selector_stays_unset(
    kube: KubeCluster, created: Callable[[Manifest], Manifest]
) -> None:
    manifest = cluster_queue("nosel")
    del manifest["spec"]["namespaceSelector"]
    stored = ClusterQueue.from_dict(_get(kube, created(manifest)))
    assert stored.spec.namespace_selector is None
    assert not stored.spec.selects_namespace({"kubernetes.io/metadata.name": "default"})


def test_objects_read_back_through_the_models(
    kube: KubeCluster, created: Callable[[Manifest], Manifest]
) -> None:
    docs = list(yaml.safe_load_all(KUEUE_DOCS_SETUP))
    rf = created(docs[0])
    cq = docs[1]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] = rf["metadata"]["name"]
    cq = created(cq)
    lq = docs[2]
    lq["spec"]["clusterQueue"] = cq["metadata"]["name"]
    lq = created(lq)
    assert ResourceFlavor.from_dict(_get(kube, rf)).spec.node_taints is not None
    stored = ClusterQueue.from_dict(_get(kube, cq))
    cpu = stored.spec.resource_groups[0].flavors[0].resources[0]
    assert (cpu.nominal_quota.value, cpu.borrowing_limit, cpu.lending_limit) == (
        9,
        ClusterQueue.from_dict(cq).spec.resource_groups[0].flavors[0].resources[0].borrowing_limit,
        ClusterQueue.from_dict(cq).spec.resource_groups[0].flavors[0].resources[0].lending_limit,
    )
    assert LocalQueue.from_dict(_get(kube, lq)).spec.cluster_queue == cq["metadata"]["name"]


# --- printer columns --------------------------------------------------------------------------


def _header(kube: KubeCluster, resource: str, name: str, *flags: str) -> list[str]:
    out = kube.kubectl("get", resource, name, *flags).stdout
    header = out.splitlines()[0]
    return [c for c in header.split("  ") if c.strip()]


@pytest.mark.parametrize(
    ("manifest", "resource", "columns", "wide"),
    [
        pytest.param(
            cluster_queue("cols"),
            "clusterqueues",
            ["NAME", "COHORT", "PENDING WORKLOADS"],
            ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
            id="clusterqueue",
        ),
        pytest.param(
            local_queue("cols"),
            "localqueues",
            ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
            None,
            id="localqueue",
        ),
        pytest.param(
            workload("cols"),
            "workloads.kueue.x-k8s.io",
            ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],
            None,
            id="workload",
        ),
        pytest.param(priority_class("cols"), "wpc", ["NAME", "VALUE"], None, id="priorityclass"),
        pytest.param(resource_flavor("cols"), "rf", ["NAME", "AGE"], None, id="resourceflavor"),
        pytest.param(cohort("cols"), "co", ["NAME", "AGE"], None, id="cohort"),
        pytest.param(topology("cols"), "topo", ["NAME", "AGE"], None, id="topology"),
        pytest.param(admission_check("cols"), "ac", ["NAME", "AGE"], None, id="admissioncheck"),
    ],
)
def test_kubectl_get_shows_kueue_columns(
    kube: KubeCluster,
    created: Callable[[Manifest], Manifest],
    *,
    manifest: Manifest,
    resource: str,
    columns: list[str],
    wide: list[str] | None,
) -> None:
    made = created(manifest)
    namespace = made["metadata"].get("namespace")
    flags = ("-n", namespace) if namespace else ()
    name = made["metadata"]["name"]
    assert [c.strip() for c in _header(kube, resource, name, *flags)] == columns
    if wide:
        assert [c.strip() for c in _header(kube, resource, name, *flags, "-o", "wide")] == wide


def test_workload_columns_show_status(
    kube: KubeCluster, created: Callable[[Manifest], Manifest]
) -> None:
    made = created(workload("status", queueName="user-queue"))
    now = "2026-12-03T00:00:00Z"
    status = {
        "admission": {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}
            ],
        },
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
            for t in ("QuotaReserved", "Admitted")
        ],
    }
    name, namespace = made["metadata"]["name"], made["metadata"]["namespace"]
    kube.kubectl(
        "patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip
    row = kube.kubectl("get", "kwl", name, "-n", namespace, "--no-headers").stdout.split()
    assert row[:4] == [name, "user-queue", "cluster-queue", "True"]


# --- invalid manifests ------------------------------------------------------------------------


def _cq_spec(**spec: Any) -> Manifest:
    return cluster_queue("bad", **spec)


def _flavors(count: int) -> list[Manifest]:
    return [flavor(f"f{i}", quota("cpu", 1)) for i in range(count)]


QUOTA = "spec.resourceGroups[0].flavors[0].resources[0]"

INVALID = [
    # ClusterQueue quotas
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(cpu="-1")]),
        [f"{QUOTA}.nominalQuota", "nominalQuota must be non-negative"],
        id="cq-negative-nominal-quota-string",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(cpu=-3)]),
        [f"{QUOTA}.nominalQuota", "nominalQuota must be non-negative"],
        id="cq-negative-nominal-quota-int",
    ),
    pytest.param(
        _cq_spec(cohortName="c", resourceGroups=[cpu_group(borrowingLimit="-500m")]),
        [f"{QUOTA}.borrowingLimit", "borrowingLimit must be non-negative"],
        id="cq-negative-borrowing-limit",
    ),
    pytest.param(
        _cq_spec(cohortName="c", resourceGroups=[cpu_group(lendingLimit=-1)]),
        [f"{QUOTA}.lendingLimit", "lendingLimit must be non-negative"],
        id="cq-negative-lending-limit",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(cpu="9Gb")]),
        [f"{QUOTA}.nominalQuota", "should match"],
        id="cq-bad-quantity",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(cpu="1.2.3")]),
        [f"{QUOTA}.nominalQuota", "should match"],
        id="cq-bad-quantity-two-dots",
    ),
    pytest.param(
        without(_cq_spec(), "spec.resourceGroups.0.flavors.0.resources.0.nominalQuota"),
        [f"{QUOTA}.nominalQuota", "Required value"],
        id="cq-missing-nominal-quota",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(borrowingLimit=2)]),
        ["spec.resourceGroups", "borrowingLimit must be nil when cohort is empty"],
        id="cq-borrowing-limit-without-cohort",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(lendingLimit=2)]),
        ["spec.resourceGroups", "lendingLimit must be nil when cohort is empty"],
        id="cq-lending-limit-without-cohort",
    ),
    # ClusterQueue resource groups
    pytest.param(
        _cq_spec(
            resourceGroups=[cpu_group("a"), group(["memory"], flavor("a", quota("memory", 1)))]
        ),
        ["spec.resourceGroups", "a flavor can appear in only one resourceGroup"],
        id="cq-duplicate-flavor-across-groups",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group("a"), cpu_group("b")]),
        ["spec.resourceGroups", "a resource can appear in only one resourceGroup"],
        id="cq-duplicate-resource-across-groups",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[cpu_group(f"f{i}") for i in range(17)]),
        ["spec.resourceGroups", "must have at most 16 items"],
        id="cq-17-resource-groups",
    ),
    pytest.param(
        _cq_spec(
            resourceGroups=[
                group([f"r{g}"], *(flavor(f"g{g}-f{i}", quota(f"r{g}", 1)) for i in range(52)))
                for g in range(5)
            ]
        ),
        ["spec.resourceGroups", "at most 256 flavors across its resourceGroups"],
        id="cq-260-flavors-across-groups",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[group(["cpu"], *_flavors(65))]),
        ["spec.resourceGroups[0].flavors", "must have at most 64 items"],
        id="cq-65-flavors-in-a-group",
    ),
    pytest.param(
        _cq_spec(
            resourceGroups=[
                group(["cpu"], flavor("a", quota("cpu", 1)), flavor("a", quota("cpu", 2)))
            ]
        ),
        [".spec.resourceGroups[0].flavors", 'duplicate entries for key [name="a"]'],
        id="cq-same-flavor-twice-in-a-group",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[group(["cpu", "memory"], flavor("a", quota("cpu", 1)))]),
        ["spec.resourceGroups[0].flavors", "same number of resources as the coveredResources"],
        id="cq-flavor-misses-a-covered-resource",
    ),
    pytest.param(
        _cq_spec(
            resourceGroups=[
                group(["cpu", "memory"], flavor("a", quota("memory", 1), quota("cpu", 1)))
            ]
        ),
        ["spec.resourceGroups[0].flavors", "coveredResources, in the same order"],
        id="cq-resources-out-of-order",
    ),
    pytest.param(
        _cq_spec(resourceGroups=[group([], flavor("a", quota("cpu", 1)))]),
        ["spec.resourceGroups[0].coveredResources", "at least 1 items"],
        id="cq-no-covered-resources",
    ),
    # ClusterQueue enums and names
    pytest.param(
        _cq_spec(queueingStrategy="FIFO"),
        ["spec.queueingStrategy", 'Unsupported value: "FIFO"'],
        id="cq-unknown-queueing-strategy",
    ),
    pytest.param(
        _cq_spec(stopPolicy="Pause"),
        ["spec.stopPolicy", 'Unsupported value: "Pause"'],
        id="cq-unknown-stop-policy",
    ),
    pytest.param(
        _cq_spec(preemption={"withinClusterQueue": "Always"}),
        ["spec.preemption.withinClusterQueue", 'Unsupported value: "Always"'],
        id="cq-unknown-within-cluster-queue",
    ),
    pytest.param(
        _cq_spec(preemption={"reclaimWithinCohort": "Sometimes"}),
        ["spec.preemption.reclaimWithinCohort", 'Unsupported value: "Sometimes"'],
        id="cq-unknown-reclaim-within-cohort",
    ),
    pytest.param(
        _cq_spec(flavorFungibility={"whenCanBorrow": "Borrow"}),
        ["spec.flavorFungibility.whenCanBorrow", 'Unsupported value: "Borrow"'],
        id="cq-v1beta1-fungibility-value",
    ),
    pytest.param(
        _cq_spec(flavorFungibility={"preference": "PreemptionOverBorrowing"}),
        ["spec.flavorFungibility", "preference can only be set"],
        id="cq-preference-without-try-next-flavor",
    ),
    pytest.param(
        _cq_spec(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}),
        ["spec.preemption", "borrowWithinCohort.policy must be Never"],
        id="cq-borrow-within-cohort-without-reclaim",
    ),
    pytest.param(
        _cq_spec(cohortName="Team_A"),
        ["spec.cohortName", "should match"],
        id="cq-cohort-name-not-dns",
    ),
    pytest.param(
        _cq_spec(fairSharing={"weight": "-1"}),
        ["spec.fairSharing.weight", "weight must be non-negative"],
        id="cq-negative-fair-sharing-weight",
    ),
    pytest.param(
        _cq_spec(admissionScope={"admissionMode": "Fair"}),
        ["spec.admissionScope.admissionMode", 'Unsupported value: "Fair"'],
        id="cq-unknown-admission-mode",
    ),
    # LocalQueue
    pytest.param(
        local_queue("bad", stopPolicy="Stop"),
        ["spec.stopPolicy", 'Unsupported value: "Stop"'],
        id="lq-unknown-stop-policy",
    ),
    pytest.param(
        local_queue("bad", clusterQueue="Cluster_Queue"),
        ["spec.clusterQueue", "should match"],
        id="lq-cluster-queue-name-not-dns",
    ),
    # ResourceFlavor
    pytest.param(
        resource_flavor("bad", nodeTaints=[{"key": "k", "effect": "NoRun"}]),
        ["spec.nodeTaints", "supported taint effect values"],
        id="rf-unknown-taint-effect",
    ),
    pytest.param(
        resource_flavor(
            "bad",
            nodeTaints=[
                {"key": "spot", "value": "a", "effect": "NoSchedule"},
                {"key": "spot", "value": "b", "effect": "NoSchedule"},
            ],
        ),
        ["spec.nodeTaints", "nodeTaints must be unique by key and effect"],
        id="rf-duplicate-taint",
    ),
    pytest.param(
        resource_flavor("bad", nodeTaints=[{"effect": "NoSchedule"}]),
        ["spec.nodeTaints[0].key", "Required value"],
        id="rf-taint-without-key",
    ),
    pytest.param(
        resource_flavor("bad", tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        ["spec.tolerations", "a value must be empty when 'operator' is 'Exists'"],
        id="rf-exists-toleration-with-value",
    ),
    pytest.param(
        resource_flavor("bad", tolerations=[{"key": "k", "operator": "In"}]),
        ["spec.tolerations", "supported toleration values"],
        id="rf-unknown-toleration-operator",
    ),
    pytest.param(
        resource_flavor(
            "bad", tolerations=[{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]
        ),
        ["spec.tolerations", "effect must be 'NoExecute' when 'tolerationSeconds' is set"],
        id="rf-toleration-seconds-without-no-execute",
    ),
    pytest.param(
        resource_flavor("bad", tolerations=[{"operator": "Equal", "value": "v"}]),
        ["spec.tolerations", "operator must be Exists when 'key' is empty"],
        id="rf-toleration-without-key-not-exists",
    ),
    pytest.param(
        resource_flavor("bad", topologyName="default"),
        ["spec.topologyName", "at least one nodeLabel is required when topology is set"],
        id="rf-topology-without-node-labels",
    ),
    pytest.param(
        resource_flavor("bad", nodeLabels={f"l{i}": "v" for i in range(9)}),
        ["spec.nodeLabels", "must have at most 8 items"],
        id="rf-nine-node-labels",
    ),
    # Cohort
    pytest.param(
        cohort("bad", resourceGroups=[cpu_group(borrowingLimit=1)]),
        ["spec.resourceGroups", "borrowingLimit must be nil when parent is empty"],
        id="cohort-borrowing-limit-without-parent",
    ),
    pytest.param(
        cohort(
            "bad",
            parentName="root",
            resourceGroups=[cpu_group("a"), group(["gpu"], flavor("a", quota("gpu", 1)))],
        ),
        ["spec.resourceGroups", "a flavor can appear in only one resourceGroup"],
        id="cohort-duplicate-flavor-across-groups",
    ),
    pytest.param(
        cohort("bad", resourceGroups=[cpu_group(lendingLimit=1)]),
        ["spec.resourceGroups", "lendingLimit must be nil when parent is empty"],
        id="cohort-lending-limit-without-parent",
    ),
    # Topology
    pytest.param(
        topology("bad", "rack", "rack"),
        ["spec.levels", "must be unique"],
        id="topology-duplicate-levels",
    ),
    pytest.param(
        topology("bad", "kubernetes.io/hostname", "rack"),
        ["spec.levels", "kubernetes.io/hostname label can only be used at the lowest level"],
        id="topology-hostname-not-last",
    ),
    pytest.param(
        topology("bad", *(f"level-{i}" for i in range(17))),
        ["spec.levels", "must have at most 16 items"],
        id="topology-17-levels",
    ),
    pytest.param(
        without(topology("bad"), "spec.levels"),
        ["spec.levels", "Required value"],
        id="topology-without-levels",
    ),
    pytest.param(
        topology("bad", "not a label!"),
        ["spec.levels[0].nodeLabel", "should match"],
        id="topology-level-not-a-label",
    ),
    # WorkloadPriorityClass
    pytest.param(
        without(priority_class("bad"), "value"),
        ["value", "Required value"],
        id="wpc-without-value",
    ),
    pytest.param(
        priority_class("bad", description="x" * 2049),
        ["description", "Too long"],
        id="wpc-description-too-long",
    ),
    # AdmissionCheck
    pytest.param(
        admission_check("bad", controllerName=""),
        ["spec.controllerName", "at least 1 chars"],
        id="ac-empty-controller-name",
    ),
    # Workload
    pytest.param(
        workload("bad", pod_sets=[pod_set(f"ps{i}") for i in range(19)]),
        ["spec.podSets", "must have at most 18 items"],
        id="workload-19-podsets",
    ),
    pytest.param(
        workload("bad", pod_sets=[]),
        ["spec.podSets", "at least 1 items"],
        id="workload-no-podsets",
    ),
    pytest.param(
        workload("bad", pod_sets=[pod_set(count=2, minCount=3)]),
        ["spec.podSets[0].minCount", "minCount should be positive and less or equal to count"],
        id="workload-min-count-above-count",
    ),
    pytest.param(
        workload("bad", pod_sets=[pod_set(count=-1)]),
        ["spec.podSets[0].count", "greater than or equal to 0"],
        id="workload-negative-count",
    ),
    pytest.param(
        workload("bad", pod_sets=[{"name": "main", "count": 1}]),
        ["spec.podSets[0].template", "Required value"],
        id="workload-podset-without-template",
    ),
    pytest.param(
        workload(
            "bad",
            priorityClassRef={
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "p",
            },
        ),
        ["spec.priority", "priority should not be nil when priorityClassRef is set"],
        id="workload-priority-class-ref-without-priority",
    ),
    pytest.param(
        workload(
            "bad",
            priority=1,
            priorityClassRef={
                "group": "scheduling.k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "p",
            },
        ),
        ["spec.priorityClassRef", "only the PriorityClass kind is allowed"],
        id="workload-priority-class-ref-group-kind-mismatch",
    ),
]


def test_at_least_thirty_invalid_manifests() -> None:
    assert len(INVALID) >= 30


@pytest.mark.parametrize(("manifest", "expected"), INVALID)
def test_invalid_manifest_is_rejected_naming_the_field(
    kube: KubeCluster, manifest: Manifest, expected: list[str]
) -> None:
    done = _dry_run(kube, manifest)
    assert done.returncode != 0, f"accepted: {done.stdout}"
    for fragment in expected:
        assert fragment in done.stderr, done.stderr


IMMUTABLE = [
    pytest.param(
        local_queue("imm", clusterQueue="one"),
        {"spec": {"clusterQueue": "two"}},
        ["spec.clusterQueue", "field is immutable"],
        id="localqueue-cluster-queue",
    ),
    pytest.param(
        resource_flavor("imm", nodeLabels={"a": "b"}, topologyName="one"),
        {"spec": {"topologyName": "two"}},
        ["spec.topologyName", "topologyName is immutable"],
        id="resourceflavor-topology-name",
    ),
    pytest.param(
        topology("imm", "block", "rack"),
        {"spec": {"levels": [{"nodeLabel": "block"}]}},
        ["spec.levels", "levels are mutable only when kubernetes.io/hostname is the lowest"],
        id="topology-levels",
    ),
    pytest.param(
        admission_check("imm"),
        {"spec": {"controllerName": "example.com/other"}},
        ["spec.controllerName", "field is immutable"],
        id="admissioncheck-controller-name",
    ),
]


@pytest.mark.parametrize(("manifest", "patch", "expected"), IMMUTABLE)
def test_immutable_field_cannot_change(
    kube: KubeCluster,
    created: Callable[[Manifest], Manifest],
    manifest: Manifest,
    patch: Manifest,
    expected: list[str],
) -> None:
    made = created(manifest)
    args = [
        "patch",
        RESOURCES[made["kind"]],
        made["metadata"]["name"],
        "--type=merge",
        "-p",
        json.dumps(patch),
    ]
    if "namespace" in made["metadata"]:
        args += ["-n", made["metadata"]["namespace"]]
    done = kube.kubectl(*args, "--dry-run=server", check=False)
    assert done.returncode != 0, done.stdout
    for fragment in expected:
        assert fragment in done.stderr, done.stderr


def test_topology_levels_may_change_above_hostname(
    kube: KubeCluster, created: Callable[[Manifest], Manifest]
) -> None:
    made = created(topology("mut", "block", "rack", "kubernetes.io/hostname"))
    patch = {"spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    done = kube.kubectl(
        "patch", "topologies.kueue.x-k8s.io", made["metadata"]["name"], "--type=merge",
        "-p", json.dumps(patch), "--dry-run=server", check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _reserved(now: str, *extra: str) -> list[Manifest]:
    return [
        {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
        for t in ("QuotaReserved", *extra)
    ]


NOW = "2026-12-03T00:00:00Z"
ASSIGNMENT = {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}

INVALID_STATUS = [
    pytest.param(
        {
            "conditions": _reserved(NOW),
            "admission": {"clusterQueue": "cq", "podSetAssignments": []},
        },
        ["podSetAssignments must have the same number of podSets as the spec"],
        id="reserved-with-too-few-assignments",
    ),
    pytest.param(
        {
            "conditions": _reserved(NOW),
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    ASSIGNMENT
                    | {
                        "topologyAssignment": {
                            "levels": ["rack", "kubernetes.io/hostname"],
                            "slices": [
                                {
                                    "domainCount": 1,
                                    "valuesPerLevel": [{"universal": "rack-0"}],
                                    "podCounts": {"universal": 1},
                                }
                            ],
                        }
                    }
                ],
            },
        },
        ["topologyAssignment", "valuesPerLevel must have the same length as the number of levels"],
        id="topology-assignment-values-per-level-mismatch",
    ),
    pytest.param(
        {
            "admissionChecks": [
                {"name": "ac", "state": "Done", "message": "", "lastTransitionTime": NOW}
            ]
        },
        ["status.admissionChecks[0].state", 'Unsupported value: "Done"'],
        id="unknown-admission-check-state",
    ),
    pytest.param(
        {"requeueState": {"count": -1}},
        ["status.requeueState.count", "greater than or equal to 0"],
        id="negative-requeue-count",
    ),
]


@pytest.mark.parametrize(("status", "expected"), INVALID_STATUS)
def test_invalid_workload_status_is_rejected(
    kube: KubeCluster,
    created: Callable[[Manifest], Manifest],
    status: Manifest,
    expected: list[str],
) -> None:
    made = created(workload("st"))
    meta = made["metadata"]
    done = kube.kubectl(
        "patch", RESOURCES["Workload"], meta["name"], "-n", meta["namespace"],
        "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        "--dry-run=server", check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    for fragment in expected:
        assert fragment in done.stderr, done.stderr


PC_REF = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}

RESERVED_IMMUTABLE = [
    pytest.param(
        {"queueName": "one"},
        {"queueName": "two"},
        "queueName is immutable while workload quota reserved",
        id="queue-name",
    ),
    pytest.param(
        {"priority": 1, "priorityClassRef": PC_REF},
        {"priorityClassRef": None},
        "priorityClassRef is immutable while workload quota reserved",
        id="priority-class-ref-removed",
    ),
    pytest.param(
        {"priority": 1, "priorityClassRef": PC_REF},
        {"priorityClassRef": PC_REF | {"name": "low"}},
        "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass",
        id="scheduling-priority-class-name",
    ),
    pytest.param(
        {"maximumExecutionTimeSeconds": 60},
        {"maximumExecutionTimeSeconds": 120},
        "maximumExecutionTimeSeconds is immutable",
        id="maximum-execution-time",
    ),
]


@pytest.mark.parametrize(("spec", "change", "message"), RESERVED_IMMUTABLE)
def test_spec_field_is_immutable_while_admitted(
    kube: KubeCluster,
    created: Callable[[Manifest], Manifest],
    spec: Manifest,
    change: Manifest,
    message: str,
) -> None:
    made = created(workload("rq", **spec))
    meta = made["metadata"]
    target = (RESOURCES["Workload"], meta["name"], "-n", meta["namespace"], "--type=merge")
    status = {
        "conditions": _reserved(NOW, "Admitted"),
        "admission": {"clusterQueue": "cq", "podSetAssignments": [ASSIGNMENT]},
    }
    kube.kubectl("patch", *target, "--subresource=status", "-p", json.dumps({"status": status}))
    done = kube.kubectl(
        "patch", *target, "-p", json.dumps({"spec": change}), "--dry-run=server", check=False
    )
    assert done.returncode != 0, done.stdout
    assert message in done.stderr, done.stderr


def test_spec_may_change_before_quota_is_reserved(
    kube: KubeCluster, created: Callable[[Manifest], Manifest]
) -> None:
    made = created(workload("free", queueName="one", maximumExecutionTimeSeconds=60))
    meta = made["metadata"]
    change = {"spec": {"queueName": "two", "maximumExecutionTimeSeconds": 120}}
    done = kube.kubectl(
        "patch", RESOURCES["Workload"], meta["name"], "-n", meta["namespace"], "--type=merge",
        "-p", json.dumps(change), "--dry-run=server", check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

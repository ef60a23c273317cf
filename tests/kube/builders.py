"""Small builders of the manifests the operator tests apply (dicts, serialized as JSON)."""

from __future__ import annotations

from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU = "nvidia.com/gpu"


def flavor(name: str, node_labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": node_labels} if node_labels else {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster_queue(
    name: str,
    flavor_name: str,
    *,
    gpus: int,
    cpu: int = 1000,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    strategy: str = "BestEffortFIFO",
    preemption: dict[str, Any] | None = None,
) -> dict[str, Any]:
    gpu_quota: dict[str, Any] = {"name": GPU, "nominalQuota": gpus}
    if borrowing_limit is not None:
        gpu_quota["borrowingLimit"] = borrowing_limit
    if lending_limit is not None:
        gpu_quota["lendingLimit"] = lending_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": strategy,
        "resourceGroups": [
            {
                "coveredResources": ["cpu", GPU],
                "flavors": [
                    {
                        "name": flavor_name,
                        "resources": [{"name": "cpu", "nominalQuota": cpu}, gpu_quota],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, namespace: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def job(
    name: str,
    namespace: str,
    *,
    queue: str | None,
    pods: int,
    gpus: int = 1,
    run: str = "2s",
    priority: str | None = None,
    node_selector: dict[str, str] | None = None,
    allreduce_seconds: float | None = None,
    required_topology: str | None = None,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if queue:
        labels[QUEUE_LABEL] = queue
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = {"atoll.dev/run-duration": run}
    if required_topology is not None:
        annotations[REQUIRED_TOPOLOGY] = required_topology
    if allreduce_seconds is not None:
        annotations["atoll.dev/allreduce-seconds"] = str(allreduce_seconds)
        annotations["atoll.dev/gang-size"] = str(pods)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.invalid/atoll/trainer:1",
                "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
        },
    }


def claim_job(name: str, ns: str, *, pods: int, template: str, run: str) -> dict[str, Any]:
    """A queued Job (LocalQueue `q`) whose pods ask for GPUs only through a
    ResourceClaimTemplate."""
    job_ = job(name, ns, queue="q", pods=pods, gpus=0, run=run)
    spec = job_["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    return job_


RACK = "topology.atoll.dev/rack"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def dgx_topology(ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Kueue Topology (block, rack, hostname) named `topo-NS` and a ResourceFlavor `rf-NS`
    using it on the dgx-h100 shape's nodes."""
    topo = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": f"topo-{ns}"},
        "spec": {
            "levels": [
                {"nodeLabel": "topology.atoll.dev/block"},
                {"nodeLabel": RACK},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }
    rf = flavor(f"rf-{ns}", node_labels={"atoll.dev/node-group": "dgx"})
    rf["spec"]["topologyName"] = f"topo-{ns}"
    return topo, rf


def dgx_tas_queue(ns: str) -> list[dict[str, Any]]:
    """`dgx_topology(ns)` with a ClusterQueue `cq-NS` of all 128 GPUs on its flavor and a
    LocalQueue `q` in `ns`."""
    topo, rf = dgx_topology(ns)
    return [
        topo,
        rf,
        cluster_queue(f"cq-{ns}", f"rf-{ns}", gpus=128),
        local_queue("q", ns, f"cq-{ns}"),
    ]


def island_claim_template(ns: str, name: str = "pair", count: int = 2) -> dict[str, Any]:
    """A ResourceClaimTemplate for `count` GPUs of the sandbox's DeviceClass, all in one
    NVLink island (`matchAttribute` on the island attribute)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.atoll.dev", "count": count},
                        }
                    ],
                    "constraints": [{"matchAttribute": "gpu.atoll.dev/island"}],
                }
            }
        },
    }

"""Small builders of Kueue manifests (plain dicts, as a user would write them) for the API tests."""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta2"

Manifest = dict[str, Any]


def quota(name: str, nominal: Any, **limits: Any) -> Manifest:
    """A resource quota: `quota("cpu", 9, borrowingLimit=2)`."""
    return {"name": name, "nominalQuota": nominal, **limits}


def flavor(name: str, *quotas: Manifest) -> Manifest:
    return {"name": name, "resources": list(quotas)}


def group(covered: list[str], *flavors: Manifest) -> Manifest:
    return {"coveredResources": covered, "flavors": list(flavors)}


def cpu_group(flavor_name: str = "default", cpu: Any = 9, **limits: Any) -> Manifest:
    """A one-resource group: `cpu` quota in one flavor."""
    return group(["cpu"], flavor(flavor_name, quota("cpu", cpu, **limits)))


def cluster_queue(name: str = "cq", **spec: Any) -> Manifest:
    spec.setdefault("namespaceSelector", {})
    spec.setdefault("resourceGroups", [cpu_group()])
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str = "lq", namespace: str = "default", **spec: Any) -> Manifest:
    spec.setdefault("clusterQueue", "cq")
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def resource_flavor(name: str = "rf", **spec: Any) -> Manifest:
    body: Manifest = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}}
    if spec:
        body["spec"] = spec
    return body


def cohort(name: str = "co", **spec: Any) -> Manifest:
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def topology(name: str = "topo", *labels: str) -> Manifest:
    levels = [{"nodeLabel": label} for label in labels or ("block", "rack")]
    return {
        "apiVersion": KUEUE,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


def priority_class(name: str = "wpc", **fields: Any) -> Manifest:
    fields.setdefault("value", 100)
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        **fields,
    }


def admission_check(name: str = "ac", **spec: Any) -> Manifest:
    spec.setdefault("controllerName", "example.com/check")
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


def pod_template(cpu: str = "1") -> Manifest:
    return {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/atoll/sleep:1",
                    "resources": {"requests": {"cpu": cpu}},
                }
            ],
        }
    }


def pod_set(name: str = "main", count: int = 1, **fields: Any) -> Manifest:
    fields.setdefault("template", pod_template())
    return {"name": name, "count": count, **fields}


def workload(
    name: str = "wl",
    namespace: str = "default",
    pod_sets: list[Manifest] | None = None,
    **spec: Any,
) -> Manifest:
    spec["podSets"] = pod_sets if pod_sets is not None else [pod_set()]
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def without(manifest: Manifest, path: str) -> Manifest:
    """`manifest` with the field at the dotted `path` (list indexes as numbers) removed."""
    *parents, last = path.split(".")
    node: Any = manifest
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    del node[last]
    return manifest


NOT_MANIFESTS = frozenset({"clusters", "scenarios", "nvidia-smi"})
"""Folders of examples/ that hold atoll inputs (cluster shapes, simulator scenarios, saved
`nvidia-smi` outputs) rather than manifests to `kubectl apply`."""

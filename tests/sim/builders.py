"""Small builders of scenario documents (plain dicts, as a scenario file holds them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atoll.api.core import Job
from atoll.control.jobframework import workload_name
from atoll.sim.scenario import Scenario, from_documents
from atoll.sim.workloads import uid_of

KUEUE = "kueue.x-k8s.io/v1beta2"
Doc = dict[str, Any]


def nodes(count: int, gpus: int, *, group: str = "g", product: str = "L4") -> list[Doc]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"{group}-{i}",
                "labels": {"atoll.dev/node-group": group, "nvidia.com/gpu.product": product},
            },
            "status": {
                "allocatable": {
                    "cpu": "64",
                    "memory": "256Gi",
                    "pods": "110",
                    "nvidia.com/gpu": gpus,
                }
            },
        }
        for i in range(count)
    ]


def flavor(name: str = "gpu", **labels: str) -> Doc:
    body: Doc = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}}
    if labels:
        body["spec"] = {"nodeLabels": labels}
    return body


def cluster_queue(name: str = "cq", gpus: int = 6, *, flavor_name: str = "gpu", **spec: Any) -> Doc:
    spec.setdefault("namespaceSelector", {})
    spec["resourceGroups"] = [
        {
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [
                {
                    "name": flavor_name,
                    "resources": [
                        {"name": "cpu", "nominalQuota": 1000},
                        {"name": "memory", "nominalQuota": "4Ti"},
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                    ],
                }
            ],
        }
    ]
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str = "lq", cq: str = "cq", namespace: str = "default") -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def priority_class(name: str, value: int) -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def job(
    name: str,
    *,
    pods: int = 4,
    gpus: int = 1,
    arrival: float = 0,
    duration: str = "10m",
    queue: str | None = "lq",
    priority: str | None = None,
    **annotations: str,
) -> Doc:
    labels = {}
    if queue is not None:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "annotations": {
                "atoll.dev/arrival": str(arrival),
                "atoll.dev/run-duration": duration,
                **annotations,
            },
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}
                            },
                        }
                    ],
                }
            },
        },
    }


def scenario(*docs: Doc | list[Doc], name: str = "test") -> Scenario:
    flat: list[Doc] = []
    for d in docs:
        flat.extend(d if isinstance(d, list) else [d])
    return from_documents(flat, name=name, base=Path("."))


def six_gpus(*jobs: Doc, **cq_spec: Any) -> Scenario:
    """3 nodes x 2 GPUs, one ClusterQueue of 6 GPUs, one LocalQueue, and these Jobs."""
    return scenario(
        nodes(3, 2),
        flavor(),
        cluster_queue(**cq_spec),
        local_queue(),
        priority_class("low", 10),
        priority_class("high", 1000),
        *jobs,
    )


def wl_key(name: str, namespace: str = "default") -> str:
    """The simulator's Workload key of the Job `name`: Kueue's `job-<name>-<hash>`, as the
    operator names it."""
    job = Job.model_validate({"metadata": {"name": name, "namespace": namespace}})
    return f"{namespace}/{workload_name(name, uid_of(job))}"

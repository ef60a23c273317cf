"""Builders of api models for control-layer tests."""

from __future__ import annotations

from typing import Any

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.core import Job
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.control import jobframework as jf
from atoll.control.integrations import Integration
from atoll.control.jobs import JobController, JobSettings
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from tests.control.fakes import FakeCluster

GPU = "nvidia.com/gpu"


def cluster_queue(name: str = "cq", gpus: int = 8, **spec: Any) -> ClusterQueue:
    return ClusterQueue.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "rf", "resources": [{"name": GPU, "nominalQuota": gpus}]}
                        ],
                    }
                ],
                **spec,
            },
        }
    )


def cache_with_queue(gpus: int = 8, **cq_spec: Any) -> Cache:
    cache = Cache()
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "rf"}}))
    cache.set_cluster_queue(cluster_queue(gpus=gpus, **cq_spec))
    cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
        )
    )
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    return cache


def job(name: str, *, pods: int = 2, gpus: int = 1, uid: str | None = None, **status: Any) -> Job:
    return Job.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": uid or f"uid-{name}",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                "creationTimestamp": "2026-12-01T00:00:00Z",
            },
            "spec": {
                "suspend": True,
                "parallelism": pods,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {GPU: str(gpus)}}}
                        ]
                    }
                },
            },
            "status": status,
        }
    )


def workload_for(j: Job, *, priority: int = 0, created: str = "2026-12-01T00:00:00Z") -> Workload:
    raw = jf.build_workload(j, jf.Priority(priority, None)).to_dict()
    raw["metadata"] |= {"creationTimestamp": created, "uid": f"wl-{j.name}", "resourceVersion": "1"}
    return Workload.from_dict(raw)


def preempted(wl: Workload) -> Workload:
    """The Workload with an Evicted condition (reason Preempted), as the scheduler writes it."""
    return wl.model_copy(
        update={
            "status": wls.status_with(
                wl,
                conditions=wls.with_condition(
                    wl.status.conditions or (),
                    wls.EVICTED,
                    status=True,
                    reason="Preempted",
                    message="Preempted to accommodate a workload",
                    now=wl.status.conditions[0].last_transition_time,  # type: ignore[index]
                ),
            )
        }
    )


def controller_for(integration: Integration[Any], fake: FakeCluster, *, gpus: int) -> JobController:
    """The reconciler of `integration`'s kind on a cache with one queue of `gpus` GPUs,
    writing Workloads to `fake`."""
    return JobController(
        cache_with_queue(gpus=gpus),
        fake,
        None,
        fake.emit,
        settings=JobSettings(),
        integration=integration,
    )


def gpu_admit(key: str, *, gpus: int = 2, cq: str = "cq", flavor: str = "gpu") -> d.Admit:
    """The engine's decision to admit Workload `key` whole in ClusterQueue `cq`: its pod set
    `main` of `gpus` pods of one GPU, on `flavor`."""
    return d.Admit(
        workload=m.WorkloadKey(key),
        cluster_queue=m.ClusterQueueName(cq),
        pod_sets=(
            d.PodSetAdmission(
                name=m.PodSetName("main"),
                flavors=((m.ResourceName("nvidia.com/gpu"), m.FlavorName(flavor)),),
                resource_usage=((m.ResourceName("nvidia.com/gpu"), gpus),),
                count=gpus,
            ),
        ),
        borrowing=False,
    )


class Clock:
    """A clock the test moves (`now`, epoch seconds)."""

    def __init__(self, now: float = 1_796_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def admission_check(name: str = "prov", *, active: bool = True) -> AdmissionCheck:
    """An AdmissionCheck whose controller has set it Active (or not)."""
    status = "True" if active else "False"
    return AdmissionCheck.from_dict(
        {
            "metadata": {"name": name},
            "spec": {"controllerName": "example.com/provisioner"},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": status,
                        "reason": "Ready" if active else "NotReady",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    }
                ]
            },
        }
    )

"""The scheduling loop charges DRA devices to the quota resource the Configuration maps their
DeviceClass to (Kueue's deviceClassMappings): admissions and pending messages speak of that
resource, and a Workload whose devices cannot be counted waits `Inadmissible` (Kueue's reason)."""

from __future__ import annotations

from typing import Any

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.control.scheduler import Scheduler
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from tests.control.fakes import FakeCluster
from tests.engine.placement_builders import cluster
from tests.state.test_devicequota import exactly, from_template, template

NOW = 1_796_000_000.0
QUOTA = "example.com/gpu"


def _cluster_queue(gpus: int) -> ClusterQueue:
    return ClusterQueue.from_dict(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", QUOTA],
                        "flavors": [
                            {
                                "name": "rf",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 100},
                                    {"name": QUOTA, "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )


def _setup(gpus: int = 4) -> tuple[Scheduler, FakeCluster]:
    cache = Cache(inventory=cluster("pcie-bridged-pairs"), device_classes={"gpu.atoll.dev": QUOTA})
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "rf"}}))
    cache.set_cluster_queue(_cluster_queue(gpus))
    cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
        )
    )
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    fake = FakeCluster()
    return Scheduler(cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW), fake


async def _add(sched: Scheduler, fake: FakeCluster, name: str, claim: dict[str, Any]) -> str:
    raw = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-12-01T00:00:0{len(fake.workloads)}Z",
        },
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ],
                            "resourceClaims": [claim],
                        }
                    },
                }
            ],
        },
    }
    created = await fake.create_workload(Workload.from_dict(raw))
    sched.cache.set_workload(created)
    return wls.wl_key(created)


def _reason(wl: Workload) -> tuple[str, str]:
    cond = wls.condition(wl, wls.QUOTA_RESERVED)
    assert cond is not None
    return cond.reason, cond.message


async def test_quota_of_the_mapped_resource_admits_two_pair_gangs_and_holds_the_third() -> None:
    sched, fake = _setup(gpus=4)
    sched.cache.set_claim_template(template("pair", exactly(count=2)))
    keys = [await _add(sched, fake, n, from_template("gpus", "pair")) for n in ("a", "b", "c")]
    for _ in range(3):
        await sched.run_once()
    first, second, third = (fake.workloads[k] for k in keys)
    for wl in (first, second):
        assert wls.is_admitted(wl)
        assert wl.status.admission is not None
        (ps,) = wl.status.admission.pod_set_assignments
        assert ps.flavors == {"cpu": "rf", QUOTA: "rf"}
        assert {r: str(q) for r, q in (ps.resource_usage or {}).items()} == {
            "cpu": "1",
            QUOTA: "2",
        }
    assert not wls.has_quota(third)
    reason, message = _reason(third)
    assert reason == "Pending"
    assert f"insufficient unused quota for {QUOTA} in flavor rf, 2 more needed" in message


async def test_unmapped_device_class_waits_inadmissible_naming_the_field() -> None:
    sched, fake = _setup()
    sched.cache.set_claim_template(template("nic", exactly("nic.example.com")))
    key = await _add(sched, fake, "a", from_template("nics", "nic"))
    await sched.run_once()
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    message = (
        "spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName: Not found: "
        '"DeviceClass nic.example.com is not mapped in DRA configuration for podset main"'
    )
    assert _reason(wl) == ("Inadmissible", message)  # Kueue's, for devices it cannot count
    assert ("Workload/ns/a", "Inadmissible", message) in fake.events
    assert key in sched.cache.parked_keys()


async def test_a_job_whose_template_arrives_later_is_admitted_then() -> None:
    sched, fake = _setup()
    key = await _add(sched, fake, "a", from_template("gpus", "late"))
    await sched.run_once()
    reason, message = _reason(fake.workloads[key])
    assert reason == "Inadmissible"
    assert "ResourceClaimTemplate late in podset main" in message
    sched.cache.set_claim_template(template("late", exactly(count=2)))
    await sched.run_once()
    wl = fake.workloads[key]
    assert wls.is_admitted(wl)
    assert wl.status.admission is not None
    assert str((wl.status.admission.pod_set_assignments[0].resource_usage or {})[QUOTA]) == "2"

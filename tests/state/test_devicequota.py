"""Quota for DRA devices (Kueue's deviceClassMappings): what a Workload's claim templates count
as, what cannot be counted (with Kueue's message naming the field), and how the cache keeps the
count up to date when a template arrives after its Job."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.configuration import Configuration
from atoll.api.resource import ResourceClaimTemplate
from atoll.api.workload import Workload
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.devicequota import (
    NAMED_CLAIMS_UNSUPPORTED,
    DeviceQuotaError,
    class_resources,
    workload_devices,
)
from tests.control.builders import cache_with_queue

NOW = 1_796_000_000.0
GPU_CLASS = "gpu.atoll.dev"
QUOTA = "example.com/gpu"
CLASSES = {GPU_CLASS: QUOTA, "nic.example.com": "example.com/nic"}


def exactly(device_class: str = GPU_CLASS, **fields: Any) -> dict[str, Any]:
    return {"deviceClassName": device_class, **fields}


def template(name: str, *requests: dict[str, Any]) -> ResourceClaimTemplate:
    """A template whose requests are `exactly` bodies, or full requests when they have a
    `name` (for firstAvailable)."""
    reqs = [r if "name" in r else {"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]
    return ResourceClaimTemplate.from_dict(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"spec": {"devices": {"requests": reqs}}},
        }
    )


def workload(*claims: dict[str, str], count: int = 2, name: str = "wl") -> Workload:
    return Workload.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "creationTimestamp": "2026-12-01T00:00:00Z",
            },
            "spec": {
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "main",
                        "count": count,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "x",
                                        "resources": {"requests": {"cpu": "1"}},
                                    }
                                ],
                                "resourceClaims": list(claims),
                            }
                        },
                    }
                ],
            },
        }
    )


def from_template(claim: str, tpl: str) -> dict[str, str]:
    return {"name": claim, "resourceClaimTemplateName": tpl}


def lookup(*templates: ResourceClaimTemplate) -> Any:
    by_name = {t.name: t for t in templates}
    return by_name.get


# -- counting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("templates", "claims", "expected"),
    [
        pytest.param(
            [template("pair", exactly(count=2))],
            [from_template("gpus", "pair")],
            {QUOTA: 2},
            id="exact-count",
        ),
        pytest.param(
            [template("one", exactly())],
            [from_template("gpus", "one")],
            {QUOTA: 1},
            id="count-defaults-to-one",
        ),
        pytest.param(
            [template("mixed", exactly(count=2), exactly(count=3), exactly("nic.example.com"))],
            [from_template("devs", "mixed")],
            {QUOTA: 5, "example.com/nic": 1},
            id="requests-of-one-claim-add-up-per-resource",
        ),
        pytest.param(
            [template("pair", exactly(count=2))],
            [from_template("a", "pair"), from_template("b", "pair")],
            {QUOTA: 4},
            id="each-claim-from-a-template-counts",
        ),
        pytest.param(
            [template("admin", exactly(count=4, adminAccess=True), exactly(count=1))],
            [from_template("gpus", "admin")],
            {QUOTA: 1},
            id="admin-access-counts-nothing",
        ),
    ],
)
def test_devices_count_per_pod_as_the_mapped_resource(
    templates: list[ResourceClaimTemplate], claims: list[dict[str, str]], expected: dict[str, int]
) -> None:
    assert workload_devices(workload(*claims), lookup(*templates), CLASSES) == {"main": expected}


def test_pod_sets_without_claims_count_nothing() -> None:
    assert workload_devices(workload(), lookup(), CLASSES) == {}


def test_class_resources_come_from_the_configurations_mappings() -> None:
    cfg = Configuration.model_validate(
        {
            "resources": {
                "deviceClassMappings": [
                    {"name": QUOTA, "deviceClassNames": [GPU_CLASS, "gpu.example.com"]},
                    {"name": "example.com/nic", "deviceClassNames": ["nic.example.com"]},
                ]
            }
        }
    )
    assert class_resources(cfg.resources.device_class_mappings) == {
        GPU_CLASS: QUOTA,
        "gpu.example.com": QUOTA,
        "nic.example.com": "example.com/nic",
    }


# -- what Kueue cannot count -----------------------------------------------------------------

CLAIM = "spec.podSets[0].template.spec.resourceClaims[0]"


@pytest.mark.parametrize(
    ("templates", "claim", "message"),
    [
        pytest.param(
            [template("gpus", exactly("other.example.com"))],
            from_template("gpus", "gpus"),
            f'{CLAIM}.resourceClaimTemplateName: Not found: "DeviceClass other.example.com is '
            'not mapped in DRA configuration for podset main"',
            id="unmapped-class",
        ),
        pytest.param(
            [template("all", exactly(allocationMode="All"))],
            from_template("gpus", "all"),
            f'{CLAIM}.devices.requests[0].exactly.allocationMode: Invalid value: "All": '
            "ResourceClaimTemplate all: AllocationMode 'All' is not supported",
            id="allocation-mode-all",
        ),
        pytest.param(
            [
                template(
                    "alt",
                    exactly(count=1),
                    {
                        "name": "any",
                        "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}],
                    },
                )
            ],
            from_template("gpus", "alt"),
            f"{CLAIM}.devices.requests[1]: Invalid value: null: ResourceClaimTemplate alt: "
            "FirstAvailable device selection is not supported",
            id="first-available",
        ),
        pytest.param(
            [],
            from_template("gpus", "missing"),
            f"{CLAIM}: Internal error: failed to get claim spec for ResourceClaimTemplate "
            'missing in podset main: resourceclaimtemplates.resource.k8s.io "missing" not found',
            id="missing-template",
        ),
        pytest.param(
            [],
            {"name": "shared", "resourceClaimName": "team-gpus"},
            f"{NAMED_CLAIMS_UNSUPPORTED}: {CLAIM}.resourceClaimName: claim 'shared' uses the "
            "shared ResourceClaim 'team-gpus'; devices are counted only for "
            "resourceClaimTemplateName",
            id="claim-by-name",
        ),
    ],
)
def test_what_cannot_be_counted_is_named_with_kueues_message(
    templates: list[ResourceClaimTemplate], claim: dict[str, str], message: str
) -> None:
    with pytest.raises(DeviceQuotaError) as caught:
        workload_devices(workload(claim), lookup(*templates), CLASSES)
    assert str(caught.value) == message


def test_a_missing_template_is_named_so_its_arrival_can_retry() -> None:
    with pytest.raises(DeviceQuotaError) as caught:
        workload_devices(workload(from_template("gpus", "late")), lookup(), CLASSES)
    assert caught.value.template == "late"


# -- the cache: engine workloads carry the devices, or why they can't be counted -------------


def _cache(**classes: str) -> Cache:
    cache = cache_with_queue()
    cache.device_classes = dict(classes) or {GPU_CLASS: QUOTA}
    return cache


def _pending_requests(cache: Cache) -> dict[str, int]:
    (group,) = cache.pending_by_queue(NOW).values()
    (ew,) = group
    assert ew.misconfigured is None, ew.misconfigured
    return dict(ew.pod_sets[0].requests)


def test_pending_workload_requests_include_the_mapped_devices() -> None:
    cache = _cache()
    cache.set_claim_template(template("pair", exactly(count=2)))
    cache.set_workload(workload(from_template("gpus", "pair"), count=3))
    # Per pod: the engine multiplies by the pod count (3 pods x 2 devices = 6).
    assert _pending_requests(cache) == {"cpu": 1000, QUOTA: 2}


def test_without_mappings_devices_are_not_charged() -> None:
    cache = cache_with_queue()
    cache.set_workload(workload(from_template("gpus", "missing")))
    assert _pending_requests(cache) == {"cpu": 1000}


def test_template_arriving_after_the_job_is_counted_and_retried() -> None:
    cache = _cache()
    wl = workload(from_template("gpus", "pair"))
    cache.set_workload(wl)
    key = wls.wl_key(wl)
    ew = cache.engine_workload(key)
    assert ew is not None
    assert ew.misconfigured is not None
    assert ew.misconfigured.endswith(
        'ResourceClaimTemplate pair in podset main: resourceclaimtemplates.resource.k8s.io "pair"'
        " not found"
    )
    cache.park(key)
    assert key in cache.parked_keys()
    cache.set_claim_template(template("pair", exactly(count=2)))
    assert key not in cache.parked_keys()
    assert _pending_requests(cache) == {"cpu": 1000, QUOTA: 2}


def test_a_changed_or_deleted_template_is_counted_again() -> None:
    cache = _cache()
    cache.set_claim_template(template("pair", exactly(count=2)))
    wl = workload(from_template("gpus", "pair"))
    cache.set_workload(wl)
    assert _pending_requests(cache)[QUOTA] == 2
    cache.set_claim_template(template("pair", exactly(count=4)))
    assert _pending_requests(cache)[QUOTA] == 4
    cache.delete_claim_template("ns", "pair")
    ew = cache.engine_workload(wls.wl_key(wl))
    assert ew is not None
    assert ew.misconfigured is not None
    assert "not found" in ew.misconfigured


def test_templates_of_other_namespaces_do_not_count() -> None:
    cache = _cache()
    other = template("pair", exactly(count=2)).model_copy(
        update={"metadata": template("pair").metadata.model_copy(update={"namespace": "other"})}
    )
    cache.set_claim_template(other)
    wl = workload(from_template("gpus", "pair"))
    cache.set_workload(wl)
    ew = cache.engine_workload(wls.wl_key(wl))
    assert ew is not None
    assert ew.misconfigured is not None

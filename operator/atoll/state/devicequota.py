"""Quota for DRA devices: the devices a Workload's ResourceClaimTemplates ask for, charged as
the quota resources the Configuration's `resources.deviceClassMappings` name.

Mirrors Kueue's pkg/dra/claims.go (`GetResourceRequestsForResourceClaimTemplates`,
`countDevicesPerClass`) and the checks of pkg/controller/core/workload_controller.go
(`handleDRA`): per pod, every device request of every claim template counts `exactly.count`
devices of its DeviceClass's mapped resource; admin-access requests count nothing. What Kueue
cannot count makes the Workload inadmissible (atoll's `Misconfigured`, written as Kueue's
`Inadmissible`) with Kueue's field-error message: a claim by `resourceClaimName`, a
`firstAvailable` request, `allocationMode: All`, an unmapped DeviceClass, a missing template.
The result is not written into the Workload's spec: as in Kueue it is added to the pod sets'
requests when the Workload is queued, so it appears in
`status.admission.podSetAssignments[].resourceUsage` and in the ClusterQueue's usage.

Kueue also checks CEL selectors against the cluster's devices here; atoll's placement does
that (atoll.state.gangs, atoll.engine.placement).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from atoll.api.configuration import DeviceClassMapping
from atoll.api.resource import AllocationMode, DeviceClaim, ResourceClaimTemplate
from atoll.api.workload import PodSet, Workload

NAMED_CLAIMS_UNSUPPORTED = "KueueDRAIntegration feature does not support use of resource claims"
"""Kueue's QuotaReserved message for a pod set that references a ResourceClaim by name."""

TemplateLookup = Callable[[str], ResourceClaimTemplate | None]
"""A ResourceClaimTemplate of the Workload's namespace by name, or None if it doesn't exist."""


class DeviceQuotaError(ValueError):
    """The devices of a Workload cannot be counted; the message is Kueue's (a field error:
    `<field path>: <type>: <detail>`), and `template` names the missing template, if that is
    the cause (the Workload is tried again when it appears)."""

    def __init__(self, message: str, *, template: str | None = None) -> None:
        super().__init__(message)
        self.template = template


def class_resources(mappings: Iterable[DeviceClassMapping]) -> dict[str, str]:
    """DeviceClass → quota resource, from `resources.deviceClassMappings` (first mapping of a
    class wins, as in Kueue's ResourceMapper; the Configuration forbids duplicates anyway)."""
    out: dict[str, str] = {}
    for mapping in mappings:
        for device_class in mapping.device_class_names:
            out.setdefault(device_class, mapping.name)
    return out


def _claim_path(pod_set: int, claim: int) -> str:
    return f"spec.podSets[{pod_set}].template.spec.resourceClaims[{claim}]"


def devices_per_class(claim: DeviceClaim, *, path: str, template: str) -> dict[str, int]:
    """Devices per DeviceClass one claim asks for (Kueue's countDevicesPerClass), in request
    order; raises DeviceQuotaError for what Kueue does not count."""
    out: dict[str, int] = {}
    for index, request in enumerate(claim.requests or ()):
        where = f"{path}.devices.requests[{index}]"
        if request.first_available is not None:
            raise DeviceQuotaError(
                f"{where}: Invalid value: null: ResourceClaimTemplate {template}: "
                "FirstAvailable device selection is not supported"
            )
        exactly = request.exactly
        if exactly is None:
            raise DeviceQuotaError(
                f"{where}: Invalid value: null: ResourceClaimTemplate {template}: "
                "Exactly must be set if FirstAvailable is nil"
            )
        if exactly.admin_access:
            continue
        if exactly.allocation_mode is AllocationMode.ALL:
            raise DeviceQuotaError(
                f'{where}.exactly.allocationMode: Invalid value: "All": ResourceClaimTemplate '
                f"{template}: AllocationMode 'All' is not supported"
            )
        if exactly.device_class_name:
            name = exactly.device_class_name
            out[name] = out.get(name, 0) + exactly.count
    return out


def pod_set_devices(
    index: int, pod_set: PodSet, templates: TemplateLookup, classes: Mapping[str, str]
) -> dict[str, int]:
    """Per-pod quota resources of one pod set's claim templates; raises DeviceQuotaError."""
    out: dict[str, int] = {}
    for claim_index, ref in enumerate(pod_set.template.spec.resource_claims or ()):
        name = ref.resource_claim_template_name
        if name is None:
            continue
        path = _claim_path(index, claim_index)
        template = templates(name)
        if template is None:
            raise DeviceQuotaError(
                f"{path}: Internal error: failed to get claim spec for ResourceClaimTemplate "
                f"{name} in podset {pod_set.name}: resourceclaimtemplates.resource.k8s.io "
                f'"{name}" not found',
                template=name,
            )
        counts = devices_per_class(template.spec.spec.devices, path=path, template=name)
        for device_class, count in counts.items():
            resource = classes.get(device_class)
            if resource is None:
                raise DeviceQuotaError(
                    f'{path}.resourceClaimTemplateName: Not found: "DeviceClass {device_class} '
                    f'is not mapped in DRA configuration for podset {pod_set.name}"'
                )
            out[resource] = out.get(resource, 0) + count
    return out


def _named_claim(wl: Workload) -> str | None:
    for index, pod_set in enumerate(wl.spec.pod_sets):
        for claim_index, ref in enumerate(pod_set.template.spec.resource_claims or ()):
            if ref.resource_claim_name is not None:
                return (
                    f"{NAMED_CLAIMS_UNSUPPORTED}: {_claim_path(index, claim_index)}"
                    f".resourceClaimName: claim {ref.name!r} uses the shared ResourceClaim "
                    f"{ref.resource_claim_name!r}; devices are counted only for "
                    "resourceClaimTemplateName"
                )
    return None


def workload_devices(
    wl: Workload, templates: TemplateLookup, classes: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Per-pod quota resources of each pod set (by pod set name; pod sets without devices are
    left out); raises DeviceQuotaError with Kueue's message for the first problem found."""
    named = _named_claim(wl)
    if named is not None:
        raise DeviceQuotaError(named)
    out: dict[str, dict[str, int]] = {}
    for index, pod_set in enumerate(wl.spec.pod_sets):
        devices = pod_set_devices(index, pod_set, templates, classes)
        if devices:
            out[pod_set.name] = devices
    return out


def uses_template(wl: Workload, name: str) -> bool:
    """Whether some pod set of the Workload gets a claim from the template `name`."""
    return any(
        ref.resource_claim_template_name == name
        for pod_set in wl.spec.pod_sets
        for ref in pod_set.template.spec.resource_claims or ()
    )

"""Read models of the DRA objects (resource.k8s.io/v1): DeviceClass, ResourceSlice,
ResourceClaim and ResourceClaimTemplate.

Field names as in k8s.io/api/resource/v1 (its types.go). Only what atoll's device matching
reads is typed; unknown fields are ignored.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from pydantic import Field

from atoll.api.core import NodeSelector, Toleration
from atoll.api.meta import ApiModel, KubeObject, StrEnum
from atoll.api.quantity import Quantity

API_VERSION: Final = "resource.k8s.io/v1"


class CelSelector(ApiModel):
    """A CEL expression over a device."""

    expression: str
    """The expression; it sees `device.driver`, `device.attributes`, `device.capacity`."""


class DeviceSelector(ApiModel):
    """A device selector (only CEL exists)."""

    cel: CelSelector | None = None
    """The CEL selector."""


class DeviceClassSpec(ApiModel):
    """The desired state of a DeviceClass."""

    selectors: tuple[DeviceSelector, ...] | None = None
    """Selectors every device of the class matches."""
    extended_resource_name: str | None = None
    """Extended resource served by this class."""


class DeviceClass(KubeObject):
    """A class of devices claims ask for."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "DeviceClass"

    spec: DeviceClassSpec = DeviceClassSpec()
    """The desired state."""


class DeviceAttribute(ApiModel):
    """A device attribute: exactly one of int, bool, string, version."""

    int_value: int | None = Field(default=None, alias="int")
    """An integer value."""
    bool_value: bool | None = Field(default=None, alias="bool")
    """A boolean value."""
    string_value: str | None = Field(default=None, alias="string")
    """A string value."""
    version_value: str | None = Field(default=None, alias="version")
    """A semantic version."""

    @property
    def value(self) -> int | bool | str | None:
        for v in (self.int_value, self.bool_value, self.string_value, self.version_value):
            if v is not None:
                return v
        return None


class DeviceCapacity(ApiModel):
    """A capacity of a device."""

    value: Quantity
    """The amount."""


class DeviceTaint(ApiModel):
    """A taint on a device."""

    key: str
    """The taint key."""
    value: str | None = None
    """The taint value."""
    effect: str
    """None, NoSchedule or NoExecute."""


class Device(ApiModel):
    """One device published in a ResourceSlice."""

    name: str
    """Name, unique in the pool."""
    attributes: dict[str, DeviceAttribute] | None = None
    """Attributes by qualified name."""
    capacity: dict[str, DeviceCapacity] | None = None
    """Capacities by qualified name."""
    taints: tuple[DeviceTaint, ...] | None = None
    """Taints of the device."""
    node_name: str | None = None
    """Node of the device (per-device node selection)."""
    all_nodes: bool | None = None
    """Reachable from every node (per-device node selection)."""


class ResourcePool(ApiModel):
    """The pool a slice belongs to."""

    name: str
    """Name of the pool."""
    generation: int
    """Generation; only slices of the highest generation count."""
    resource_slice_count: int
    """Slices in the pool at this generation."""


class ResourceSliceSpec(ApiModel):
    """The devices of one slice of a pool."""

    driver: str
    """The DRA driver."""
    pool: ResourcePool
    """The pool."""
    node_name: str | None = None
    """Node whose devices these are."""
    node_selector: NodeSelector | None = None
    """Nodes that can reach these devices."""
    all_nodes: bool | None = None
    """Reachable from every node."""
    per_device_node_selection: bool | None = None
    """Each device says which nodes reach it."""
    devices: tuple[Device, ...] | None = None
    """The devices."""


class ResourceSlice(KubeObject):
    """Devices a DRA driver publishes."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceSlice"

    spec: ResourceSliceSpec
    """The slice."""


class AllocationMode(StrEnum):
    """How many devices a request takes."""

    EXACT_COUNT = "ExactCount"
    ALL = "All"


class ExactDeviceRequest(ApiModel):
    """A request for devices of one class."""

    device_class_name: str
    """The DeviceClass."""
    selectors: tuple[DeviceSelector, ...] | None = None
    """Extra selectors."""
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    """ExactCount or All."""
    count: int = 1
    """Devices wanted (ExactCount)."""
    admin_access: bool | None = None
    """Administrative access to in-use devices."""
    tolerations: tuple[Toleration, ...] | None = None
    """Tolerations of device taints."""


class DeviceSubRequest(ApiModel):
    """An alternative of a firstAvailable request."""

    name: str
    """Name of the alternative."""
    device_class_name: str
    """The DeviceClass."""
    selectors: tuple[DeviceSelector, ...] | None = None
    """Extra selectors."""
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    """ExactCount or All."""
    count: int = 1
    """Devices wanted (ExactCount)."""


class DeviceRequest(ApiModel):
    """One request of a claim: exactly one of `exactly` and `firstAvailable`."""

    name: str
    """Name of the request."""
    exactly: ExactDeviceRequest | None = None
    """A single request."""
    first_available: tuple[DeviceSubRequest, ...] | None = None
    """Alternatives tried in order."""


class DeviceConstraint(ApiModel):
    """A constraint across the devices of some requests."""

    requests: tuple[str, ...] | None = None
    """Requests it applies to; empty means all."""
    match_attribute: str | None = None
    """All devices must have this attribute with the same value."""
    distinct_attribute: str | None = None
    """All devices must have different values of this attribute."""


class DeviceClaim(ApiModel):
    """The devices a claim asks for."""

    requests: tuple[DeviceRequest, ...] | None = None
    """The requests."""
    constraints: tuple[DeviceConstraint, ...] | None = None
    """Constraints across requests."""
    config: tuple[dict[str, Any], ...] | None = None
    """Driver configuration (not used for allocation)."""


class ResourceClaimSpec(ApiModel):
    """The desired state of a claim."""

    devices: DeviceClaim = DeviceClaim()
    """The devices."""


class DeviceRequestAllocationResult(ApiModel):
    """One allocated device."""

    request: str
    """The request (or request/subrequest) it satisfies."""
    driver: str
    """The driver."""
    pool: str
    """The pool."""
    device: str
    """The device name."""


class DeviceAllocationResult(ApiModel):
    """Allocated devices."""

    results: tuple[DeviceRequestAllocationResult, ...] | None = None
    """One entry per device."""


class AllocationResult(ApiModel):
    """The result of allocating a claim."""

    devices: DeviceAllocationResult | None = None
    """The devices."""
    node_selector: NodeSelector | None = None
    """Nodes the claim can be used on."""


class ResourceClaimConsumerReference(ApiModel):
    """A consumer of a claim."""

    api_group: str | None = None
    """API group of the consumer."""
    resource: str
    """Resource of the consumer (pods)."""
    name: str
    """Name of the consumer."""
    uid: str
    """UID of the consumer."""


class ResourceClaimStatus(ApiModel):
    """The observed state of a claim."""

    allocation: AllocationResult | None = None
    """Set once allocated."""
    reserved_for: tuple[ResourceClaimConsumerReference, ...] | None = None
    """Consumers allowed to use the claim."""


class ResourceClaim(KubeObject):
    """A request for devices."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaim"

    spec: ResourceClaimSpec = ResourceClaimSpec()
    """The desired state."""
    status: ResourceClaimStatus = ResourceClaimStatus()
    """The observed state."""


class ResourceClaimTemplateSpec(ApiModel):
    """What each generated claim gets."""

    spec: ResourceClaimSpec = ResourceClaimSpec()
    """The claim spec copied into each claim."""


class ResourceClaimTemplate(KubeObject):
    """A template from which a claim is generated per pod."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaimTemplate"

    spec: ResourceClaimTemplateSpec = ResourceClaimTemplateSpec()
    """The template."""

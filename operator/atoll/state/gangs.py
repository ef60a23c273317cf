"""Turning a Workload's pod sets into the gang placement reads: per-pod requests, node
constraints, DRA claims from ResourceClaimTemplates (selectors compiled through
atoll.state.cel) and the TAS request.

Mirrors what kube-scheduler's DRA plugin reads from a pod (pod.spec.resourceClaims → the
claim spec copied from its template) and Kueue's PodSetTopologyRequest
(pkg/controller/jobframework TAS annotations). Direct `resourceClaimName` references are
refused, as Kueue refuses them (the claim is shared, not per pod).
"""

from __future__ import annotations

from collections.abc import Mapping

from atoll.api.core import PodSpec
from atoll.api.islands import ISLAND_REQUEST_ANNOTATION, ISLAND_REQUIRED
from atoll.api.resource import (
    AllocationMode,
    DeviceClaim,
    DeviceSelector,
    DeviceSubRequest,
    ExactDeviceRequest,
    ResourceClaimTemplate,
)
from atoll.api.resource import DeviceConstraint as ApiConstraint
from atoll.api.resource import DeviceRequest as ApiRequest
from atoll.api.workload import PodSet, PodSetTopologyRequest
from atoll.engine.devices import (
    Claim,
    ConstraintKind,
    DeviceConstraint,
    DeviceMatcher,
    DeviceRequest,
    RequestAlternative,
)
from atoll.engine.inventory import GangPodSet, TopologyMode, TopologyRequest
from atoll.state import convert
from atoll.state.cel import SelectorCompileError, SelectorCompiler
from atoll.state.inventory import ClusterInventory
from atoll.state.islands import GPU_RESOURCE


class GangError(ValueError):
    """A pod set atoll cannot place as written (the Workload is inadmissible; say why)."""


def _matchers(
    compiler: SelectorCompiler,
    inventory: ClusterInventory,
    class_name: str,
    selectors: tuple[DeviceSelector, ...] | None,
) -> tuple[DeviceMatcher, ...]:
    dc = inventory.device_class(class_name)
    if dc is None:
        raise GangError(f"device class {class_name} not found")
    out: list[DeviceMatcher] = []
    for sel in (*(dc.spec.selectors or ()), *(selectors or ())):
        if sel.cel is None:
            continue
        try:
            out.append(compiler.compile(sel.cel.expression))
        except SelectorCompileError as e:
            raise GangError(str(e)) from e
    return tuple(out)


def _alternative(
    compiler: SelectorCompiler,
    inventory: ClusterInventory,
    name: str,
    req: ExactDeviceRequest | DeviceSubRequest,
) -> RequestAlternative:
    return RequestAlternative(
        name=name,
        device_class=req.device_class_name,
        matchers=_matchers(compiler, inventory, req.device_class_name, req.selectors),
        all_devices=req.allocation_mode is AllocationMode.ALL,
        count=req.count,
        tolerations=tuple(convert.toleration(t) for t in getattr(req, "tolerations", None) or ()),
        admin_access=bool(getattr(req, "admin_access", None)),
    )


def _request(
    compiler: SelectorCompiler, inventory: ClusterInventory, req: ApiRequest
) -> DeviceRequest:
    alts: tuple[RequestAlternative, ...]
    if req.exactly is not None:
        alts = (_alternative(compiler, inventory, req.name, req.exactly),)
    elif req.first_available:
        alts = tuple(
            _alternative(compiler, inventory, f"{req.name}/{sub.name}", sub)
            for sub in req.first_available
        )
    else:
        raise GangError(f"request {req.name} has neither exactly nor firstAvailable")
    return DeviceRequest(name=req.name, alternatives=alts)


def _constraint(c: ApiConstraint) -> DeviceConstraint | None:
    requests = frozenset(c.requests or ())
    if c.match_attribute:
        return DeviceConstraint(
            kind=ConstraintKind.MATCH, attribute=c.match_attribute, requests=requests
        )
    if c.distinct_attribute:
        return DeviceConstraint(
            kind=ConstraintKind.DISTINCT, attribute=c.distinct_attribute, requests=requests
        )
    return None


def claim(
    name: str, spec: DeviceClaim, *, compiler: SelectorCompiler, inventory: ClusterInventory
) -> Claim:
    """The engine claim for one claim spec; raises GangError."""
    constraints = tuple(c for c in map(_constraint, spec.constraints or ()) if c is not None)
    return Claim(
        name=name,
        requests=tuple(_request(compiler, inventory, r) for r in spec.requests or ()),
        constraints=constraints,
    )


def pod_claims(
    spec: PodSpec,
    templates: Mapping[str, ResourceClaimTemplate],
    *,
    compiler: SelectorCompiler,
    inventory: ClusterInventory,
) -> tuple[Claim, ...]:
    """One claim per pod-level claim (templates by name, in the pod's namespace)."""
    out = []
    for prc in spec.resource_claims or ():
        if prc.resource_claim_name:
            raise GangError(
                f"claim {prc.name}: ResourceClaim {prc.resource_claim_name} is shared by"
                " reference; only ResourceClaimTemplates are supported"
            )
        tpl = templates.get(prc.resource_claim_template_name or "")
        if tpl is None:
            raise GangError(
                f"claim {prc.name}: ResourceClaimTemplate {prc.resource_claim_template_name}"
                " not found"
            )
        out.append(claim(prc.name, tpl.spec.spec.devices, compiler=compiler, inventory=inventory))
    return tuple(out)


def topology_request(
    req: PodSetTopologyRequest | None, topology: str | None
) -> TopologyRequest | None:
    """Kueue's request against the flavor's Topology; None when the flavor has none."""
    if req is None or topology is None:
        return None
    if req.required:
        mode, level = TopologyMode.REQUIRED, req.required
    elif req.preferred:
        mode, level = TopologyMode.PREFERRED, req.preferred
    else:
        mode, level = TopologyMode.UNCONSTRAINED, None
    return TopologyRequest(
        topology=topology,
        mode=mode,
        level=level,
        slice_level=req.pod_set_slice_required_topology,
        slice_size=req.pod_set_slice_size,
        group=req.pod_set_group_name if level is not None else None,
    )


def wants_island(ps: PodSet) -> bool:
    """The pod template carries atoll's NVLink-island annotation (any value)."""
    meta = ps.template.metadata
    return ISLAND_REQUEST_ANNOTATION in ((meta.annotations if meta else None) or {})


def island_resource(ps: PodSet, requests: Mapping[str, int]) -> str | None:
    """`nvidia.com/gpu` when the pod template asks for its GPUs in one NVLink island
    (`atoll.dev/nvlink-island: required`); raises GangError for another value or a pod that
    asks for no GPUs."""
    if not wants_island(ps):
        return None
    meta = ps.template.metadata
    value = ((meta.annotations if meta else None) or {})[ISLAND_REQUEST_ANNOTATION]
    if value != ISLAND_REQUIRED:
        raise GangError(
            f"pod template annotation {ISLAND_REQUEST_ANNOTATION}: {value!r} is not supported;"
            f" the only value is {ISLAND_REQUIRED!r}"
        )
    if requests.get(GPU_RESOURCE, 0) <= 0:
        raise GangError(
            f"pod template annotation {ISLAND_REQUEST_ANNOTATION}: the pods request no"
            f" {GPU_RESOURCE}"
        )
    return GPU_RESOURCE


def gang_pod_set(
    ps: PodSet,
    *,
    templates: Mapping[str, ResourceClaimTemplate],
    compiler: SelectorCompiler,
    inventory: ClusterInventory,
    topology: str | None = None,
    flavor_node_labels: Mapping[str, str] | None = None,
) -> GangPodSet:
    """The pod set as placement reads it; `flavor_node_labels` join the nodeSelector as
    Kueue injects them on start. Raises GangError."""
    spec = ps.template.spec
    reqs = convert.pod_requests(spec)
    selector = {**(spec.node_selector or {}), **(flavor_node_labels or {})}
    island = island_resource(ps, reqs)
    return GangPodSet(
        name=ps.name,
        count=ps.count,
        requests=tuple(sorted(reqs.items())),
        node_selector=frozenset(selector.items()),
        required_affinity=convert.required_node_terms(spec.affinity),
        tolerations=tuple(convert.toleration(t) for t in spec.tolerations or ()),
        claims=pod_claims(spec, templates, compiler=compiler, inventory=inventory),
        topology=topology_request(ps.topology_request, topology),
        island_resource=island,
    )

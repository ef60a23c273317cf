"""Label selectors, node affinity against a flavor's nodeLabels, taints against tolerations.

Mirrors k8s.io/apimachinery labels.Selector, component-helpers nodeaffinity and
FindMatchingUntoleratedTaint, as used by Kueue's pkg/scheduler/flavorassigner
(`checkFlavorForPodSets`, `flavorSelector`) and `workload.ValidateAdmissibility`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import assert_never

from atoll.engine.model import (
    Labels,
    LabelSelector,
    NodeSelectorTerm,
    PodSet,
    ResourceFlavor,
    SelectorOperator,
    SelectorRequirement,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def requirement_matches(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    match req.operator:
        case SelectorOperator.IN:
            return present and labels[req.key] in req.values
        case SelectorOperator.NOT_IN:
            return not present or labels[req.key] not in req.values
        case SelectorOperator.EXISTS:
            return present
        case SelectorOperator.DOES_NOT_EXIST:
            return not present
        case SelectorOperator.GT | SelectorOperator.LT:
            if not present or len(req.values) != 1:
                return False
            have, want = _as_int(labels[req.key]), _as_int(req.values[0])
            if have is None or want is None:
                return False
            return have > want if req.operator is SelectorOperator.GT else have < want
        case _:
            assert_never(req.operator)


def selector_matches(selector: LabelSelector | None, labels: Labels) -> bool:
    """A nil selector matches nothing (Kueue's ClusterQueue default); `{}` matches all."""
    if selector is None:
        return False
    if not selector.match_labels <= labels:
        return False
    if not selector.match_expressions:
        return True
    as_map = dict(labels)
    return all(requirement_matches(r, as_map) for r in selector.match_expressions)


def _relevant_terms(
    terms: tuple[NodeSelectorTerm, ...], keys: frozenset[str]
) -> list[list[SelectorRequirement]]:
    """Drop requirements on keys the flavor doesn't label; a term left empty matches all."""
    kept: list[list[SelectorRequirement]] = []
    for term in terms:
        exprs = [e for e in term.match_expressions if e.key in keys]
        if not exprs:
            return []
        kept.append(exprs)
    return kept


def flavor_matches_pod_set(flavor: ResourceFlavor, pod_set: PodSet) -> bool:
    """The pod's nodeSelector and required node affinity, restricted to the keys the flavor
    sets in nodeLabels, must match the flavor's nodeLabels."""
    if not pod_set.node_selector and not pod_set.required_affinity:
        return True
    labels = dict(flavor.node_labels)
    for key, value in pod_set.node_selector:
        if key in labels and labels[key] != value:
            return False
    terms = _relevant_terms(pod_set.required_affinity, frozenset(labels))
    if not terms:
        return True
    return any(all(requirement_matches(r, labels) for r in term) for term in terms)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect is not None and toleration.effect is not taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    match toleration.operator:
        case TolerationOperator.EXISTS:
            return True
        case TolerationOperator.EQUAL:
            return bool(toleration.key) and toleration.value == taint.value
        case _:
            assert_never(toleration.operator)


def untolerated_taint(taints: Iterable[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint that no toleration covers."""
    for taint in taints:
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def flavor_mismatch(flavor: ResourceFlavor, pod_set: PodSet) -> str | None:
    """Why this flavor can't host the pod set, or None when it can."""
    taint = untolerated_taint(flavor.node_taints, pod_set.tolerations + flavor.tolerations)
    if taint is not None:
        return (
            f"untolerated taint {{{taint.key} {taint.value} {taint.effect.value}}} "
            f"in flavor {flavor.name}"
        )
    if not flavor_matches_pod_set(flavor, pod_set):
        return f"flavor {flavor.name} doesn't match node affinity"
    return None

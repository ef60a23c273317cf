"""Usage kept up to date one workload at a time (quota.LiveUsage, what the cache keeps
between cycles) equals the usage charged from scratch (snapshot.charge_tree), after any
sequence of additions and removals, on random cohort trees with lending limits (where the
bubbling to the parent is not linear) (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine.model import (
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorQuotas,
    FlavorResource,
    ResourceGroup,
    ResourceName,
    ResourceQuota,
)
from atoll.engine.quota import LiveUsage, QuotaTree
from atoll.engine.snapshot import build_structure, charge_tree
from tests.engine.builders import cluster_queue, cohort

FRS: tuple[FlavorResource, ...] = tuple(
    (FlavorName(f), ResourceName(r)) for f in ("f1", "f2") for r in ("gpu", "cpu")
)


@st.composite
def _group(draw: st.DrawFn) -> ResourceGroup:
    flavors = []
    for f in ("f1", "f2"):
        resources = []
        for r in ("gpu", "cpu"):
            nominal = draw(st.integers(0, 6))
            lend = draw(st.none() | st.integers(0, nominal))
            resources.append(
                ResourceQuota(resource=ResourceName(r), nominal=nominal, lending_limit=lend)
            )
        flavors.append(FlavorQuotas(flavor=FlavorName(f), resources=tuple(resources)))
    return ResourceGroup(
        covered_resources=(ResourceName("gpu"), ResourceName("cpu")), flavors=tuple(flavors)
    )


@st.composite
def _tree(draw: st.DrawFn) -> QuotaTree:
    cohorts = [cohort("root", *([draw(_group())] if draw(st.booleans()) else []))]
    for i in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from([c.name for c in cohorts]))
        groups = [draw(_group())] if draw(st.booleans()) else []
        cohorts.append(cohort(f"k{i}", *groups, parent=parent))
    cqs = [
        cluster_queue(
            f"cq{i}", draw(_group()), cohort=draw(st.sampled_from([c.name for c in cohorts]))
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    return build_structure(cluster_queues=cqs, cohorts=cohorts).tree


_usage = st.dictionaries(st.sampled_from(FRS), st.integers(1, 9), min_size=1)


@settings(max_examples=200, deadline=None)
@given(tree=_tree(), data=st.data())
def test_incremental_usage_equals_usage_charged_from_scratch(
    tree: QuotaTree, data: st.DataObject
) -> None:
    cqs = sorted(tree.cluster_queues)
    live = LiveUsage(tree, [{} for _ in tree.nodes])
    running: dict[int, tuple[ClusterQueueName, dict[FlavorResource, int]]] = {}
    for step in range(data.draw(st.integers(1, 30))):
        remove: bool = data.draw(st.booleans())
        if running and remove:
            key = data.draw(st.sampled_from(sorted(running)))
            cq, usage = running.pop(key)
            live.remove(tree.cluster_queues[cq], usage)
        else:
            cq, usage = data.draw(st.sampled_from(cqs)), data.draw(_usage)
            running[step] = (cq, usage)
            live.add(tree.cluster_queues[cq], usage)
        per_cq: dict[ClusterQueueName, dict[FlavorResource, int]] = {}
        for cq, usage in running.values():
            total = per_cq.setdefault(cq, {})
            for fr, value in usage.items():
                total[fr] = total.get(fr, 0) + value
        # Equal as mappings, zero entries included (a removal leaves none behind).
        assert live.usage == charge_tree(tree, per_cq)


def test_a_removal_takes_back_what_bubbled_past_a_lending_limit() -> None:
    gpu = (FlavorName("f1"), ResourceName("gpu"))

    def quota(nominal: int, lend: int | None) -> ResourceGroup:
        return ResourceGroup(
            covered_resources=(ResourceName("gpu"),),
            flavors=(
                FlavorQuotas(
                    flavor=FlavorName("f1"),
                    resources=(
                        ResourceQuota(
                            resource=ResourceName("gpu"), nominal=nominal, lending_limit=lend
                        ),
                    ),
                ),
            ),
        )

    tree = build_structure(
        cluster_queues=[cluster_queue("a", quota(4, 1), cohort="root")], cohorts=[cohort("root")]
    ).tree
    a, root = tree.cluster_queues[ClusterQueueName("a")], tree.cohorts[CohortName("root")]
    live = LiveUsage(tree, [{} for _ in tree.nodes])
    live.add(a, {gpu: 2})  # 3 of 4 kept locally: nothing reaches the cohort
    live.add(a, {gpu: 3})  # 5 used: 2 above the local 3
    assert (live.usage[a], live.usage[root]) == ({gpu: 5}, {gpu: 2})
    live.remove(a, {gpu: 2})  # 3 left, all local again
    assert (live.usage[a], live.usage[root]) == ({gpu: 3}, {})

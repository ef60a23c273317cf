"""Flavor assignment with topology (`engine.topologyflavors`): a flavor whose topology
refuses the gang is skipped, and the gang is assigned again among the flavors left, with
flavorFungibility as usual. The placer here is a fake: it answers per flavor."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import (
    Admit,
    Decision,
    Pending,
    PendingReason,
    Preempt,
    PreemptionReason,
    Requeue,
    Victim,
)
from atoll.engine.model import (
    ClusterQueueName,
    FlavorName,
    FungibilityPolicy,
    ResourceFlavor,
    WorkloadKey,
)
from atoll.engine.reservedhosts import Fence
from atoll.engine.snapshot import placing
from tests.engine.builders import (
    by_workload,
    cluster_queue,
    cohort,
    fungibility,
    group,
    q,
    quotas,
    snapshot,
    summary,
    workload,
)

TRY = FungibilityPolicy.TRY_NEXT_FLAVOR
STOP = FungibilityPolicy.MAY_STOP_SEARCH

FIT, NO_DOMAIN, PREEMPT, WAIT = "fit", "no-domain", "preempt", "wait"


def _tas(name: str) -> ResourceFlavor:
    return ResourceFlavor(name=FlavorName(name), topology_name="racks")


def _flavor_of(admit: Admit) -> str:
    return next(f for ps in admit.pod_sets for _, f in ps.flavors)


@dataclass
class FakePlacer:
    """Answers each (workload, flavor) as told (default: placed); records what it was asked."""

    answers: dict[tuple[str, str], str] = field(default_factory=dict)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def place(self, admit: Admit, fence: Fence | None = None) -> Admit | Preempt | Pending:
        del fence  # no backfill reservations here
        name, flavor = admit.workload.split("/", 1)[1], _flavor_of(admit)
        self.asked.append((name, flavor))
        match self.answers.get((name, flavor), FIT):
            case "fit":
                return admit
            case "preempt":
                return Preempt(
                    workload=admit.workload,
                    cluster_queue=admit.cluster_queue,
                    victims=(
                        Victim(
                            workload=WorkloadKey(f"default/victim-in-{flavor}"),
                            cluster_queue=ClusterQueueName("cq"),
                            reason=PreemptionReason.IN_CLUSTER_QUEUE,
                        ),
                    ),
                    pod_sets=admit.pod_sets,
                    message=f"frees a rack of {flavor}",
                )
            case "wait":
                reason = PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
                return self._pending(admit, reason, f"waits for a rack of {flavor}")
            case _:
                reason = PendingReason.TOPOLOGY_PLACEMENT_FAILED
                return self._pending(admit, reason, f"no rack of {flavor} has room")

    @staticmethod
    def _pending(admit: Admit, reason: PendingReason, message: str) -> Pending:
        return Pending(
            workload=admit.workload,
            cluster_queue=admit.cluster_queue,
            reason=reason,
            message=message,
            requeue=Requeue.INADMISSIBLE,
        )

    def unplaceable(self, preempt: Preempt) -> Pending | None:
        del preempt  # every gang here fits an empty topology
        return None

    def decided(self, decision: Decision) -> None:
        pass


def _cycle(
    answers: dict[tuple[str, str], str],
    *,
    flavors: tuple[str, ...] = ("a", "b"),
    preempt: FungibilityPolicy = TRY,
    borrow: FungibilityPolicy = STOP,
    gpus: int = 8,
    heads: tuple[str, ...] = ("gang",),
    tas: tuple[str, ...] | None = None,
) -> tuple[dict[str, Decision], FakePlacer]:
    cq = cluster_queue(
        "cq",
        group(*(quotas(f, gpu=gpus) for f in flavors)),
        fungible=fungibility(borrow=borrow, preempt=preempt),
    )
    with_topology = flavors if tas is None else tas
    snap = snapshot(
        [cq],
        flavors=[
            _tas(f) if f in with_topology else ResourceFlavor(name=FlavorName(f)) for f in flavors
        ],
    )
    placer = FakePlacer(answers)
    ws = [workload(h, "cq", gpu=8, at=float(i)) for i, h in enumerate(heads)]
    return by_workload(run_cycle(placing(snap, placer), ws)), placer


def test_a_gang_refused_by_the_first_flavors_topology_is_admitted_on_the_next() -> None:
    got, placer = _cycle({("gang", "a"): NO_DOMAIN})
    assert summary(got["gang"]) == "admit:b"
    assert placer.asked == [("gang", "a"), ("gang", "b")]


def test_the_refused_flavor_takes_no_quota_from_the_heads_after_it() -> None:
    # quota for one gang per flavor: "gang" goes to b, so "next" still finds a free
    got, _ = _cycle({("gang", "a"): NO_DOMAIN}, heads=("gang", "next"))
    assert summary(got["gang"]) == "admit:b"
    assert summary(got["next"]) == "admit:a"


def test_every_flavor_refused_names_each_flavors_reason() -> None:
    got, _ = _cycle({("gang", "a"): NO_DOMAIN, ("gang", "b"): NO_DOMAIN})
    dec = got["gang"]
    assert isinstance(dec, Pending)
    assert dec.reason is PendingReason.TOPOLOGY_PLACEMENT_FAILED
    assert dec.message == (
        "couldn't assign flavors to pod set main: flavor a: no rack of a has room,"
        " flavor b: no rack of b has room"
    )


def test_one_topology_flavor_refused_keeps_the_placers_answer() -> None:
    got, _ = _cycle({("gang", "a"): NO_DOMAIN}, flavors=("a",))
    dec = got["gang"]
    assert isinstance(dec, Pending)
    assert dec.reason is PendingReason.TOPOLOGY_PLACEMENT_FAILED
    assert dec.message == "no rack of a has room"


def test_a_refusal_without_topology_is_final() -> None:
    # a flavor without a topology refused for its devices: no other flavor is tried
    got, placer = _cycle({("gang", "a"): NO_DOMAIN}, tas=())
    assert summary(got["gang"]) == "pending:TopologyPlacementFailed"
    assert placer.asked == [("gang", "a")]


@pytest.mark.parametrize(
    ("preempt", "answer", "expected"),
    [
        pytest.param(TRY, PREEMPT, "admit:b", id="preemption-try-next-flavor"),
        pytest.param(STOP, PREEMPT, "preempt:victim-in-a", id="preemption-may-stop-search"),
        pytest.param(TRY, WAIT, "admit:b", id="waiting-try-next-flavor"),
        pytest.param(STOP, WAIT, "pending:WaitingForPreemptedWorkloads", id="waiting-may-stop"),
        pytest.param(STOP, NO_DOMAIN, "admit:b", id="no-domain-always-moves-on"),
    ],
)
def test_when_can_preempt_decides_whether_a_domain_preemption_ends_the_search(
    preempt: FungibilityPolicy, answer: str, expected: str
) -> None:
    got, _ = _cycle({("gang", "a"): answer}, preempt=preempt)
    assert summary(got["gang"]) == expected


def test_the_first_domain_preemption_is_the_answer_when_no_later_flavor_admits() -> None:
    got, placer = _cycle({("gang", "a"): PREEMPT, ("gang", "b"): NO_DOMAIN})
    assert summary(got["gang"]) == "preempt:victim-in-a"
    assert placer.asked == [("gang", "a"), ("gang", "b"), ("gang", "a")]


@pytest.mark.parametrize(
    ("borrow", "expected"),
    [
        pytest.param(STOP, "admit:b", id="may-stop-search-takes-the-borrowing-flavor"),
        pytest.param(TRY, "admit:c", id="try-next-flavor-looks-for-one-without-borrowing"),
    ],
)
def test_when_can_borrow_applies_among_the_flavors_left(
    borrow: FungibilityPolicy, expected: str
) -> None:
    # a: no domain; b: fits only by borrowing from the cohort; c: fits in nominal quota
    cq = cluster_queue(
        "cq",
        group(quotas("a", gpu=8), quotas("b", gpu=q(0)), quotas("c", gpu=8)),
        cohort="all",
        fungible=fungibility(borrow=borrow),
    )
    lender = cluster_queue("lender", group(quotas("b", gpu=8)), cohort="all")
    snap = snapshot(
        [cq, lender], cohorts=[cohort("all")], flavors=[_tas("a"), _tas("b"), _tas("c")]
    )
    placer = FakePlacer({("gang", "a"): NO_DOMAIN})
    got = by_workload(run_cycle(placing(snap, placer), [workload("gang", "cq", gpu=8)]))
    assert summary(got["gang"]) == expected


ANSWERS = st.sampled_from([FIT, NO_DOMAIN, PREEMPT, WAIT])


@given(
    answers=st.lists(ANSWERS, min_size=1, max_size=4),
    preempt=st.sampled_from([TRY, STOP]),
)
def test_an_admitted_gang_is_always_placed_in_the_flavor_it_is_admitted_to(
    answers: list[str], preempt: FungibilityPolicy
) -> None:
    """Whatever each flavor's topology answers, an Admit names a flavor whose placement
    accepted the gang, and it is the first such flavor unless a domain preemption before it
    ended the search (whenCanPreempt: MayStopSearch)."""
    flavors = tuple("abcd"[: len(answers)])
    told = {("gang", f): a for f, a in zip(flavors, answers, strict=True)}
    got, placer = _cycle(told, flavors=flavors, preempt=preempt)
    dec = got["gang"]
    stops = {PREEMPT, WAIT} if preempt is STOP else set()
    first = next((f for f, a in zip(flavors, answers, strict=True) if a in {FIT} | stops), None)
    if first is not None and told[("gang", first)] == FIT:
        assert isinstance(dec, Admit)
        assert _flavor_of(dec) == first
        assert ("gang", first) in placer.asked
    else:
        assert not isinstance(dec, Admit)

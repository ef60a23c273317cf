"""The one scheduling step (`state.decide.Decider.decide`) behind the operator, the
simulator, `atoll what-if` and `atoll explain`: on random scenarios (queues, cohorts, flavors
with and without topology, preemption) what-if's answer for an added Job is the decision of
the next committed step, the operator's Scheduler on a copy decides what the simulator
decides at every step, and explain's "would fit after X finishes" is what the step does once
X is gone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from atoll.api.core import Job
from atoll.control.explain import explain
from atoll.control.scheduler import Scheduler
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.sim import workloads as sw
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.scenario import Scenario
from atoll.sim.whatif import add_job
from atoll.state.decide import Decider
from atoll.state.whatif import ask
from tests.control.fakes import FakeCluster
from tests.sim import builders as b

RACK = "topology.atoll.dev/rack"
HOST = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
POLICIES: tuple[dict[str, str] | None, ...] = (
    None,
    {"withinClusterQueue": "LowerPriority"},
    {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
    {"reclaimWithinCohort": "LowerPriority", "borrowWithinCohort": {"policy": "LowerPriority"}},  # type: ignore[dict-item]
)


def _nodes() -> list[b.Doc]:
    """8 nodes of 2 GPUs in 4 racks of 2."""
    out = b.nodes(8, 2)
    for i, node in enumerate(out):
        node["metadata"]["labels"] |= {RACK: f"rack-{i // 2}", HOST: node["metadata"]["name"]}
    return out


JobSpec = tuple[int, int, int, int, str, str, bool]
"""(pods, GPUs per pod, arrival, minutes, queue, priority, rack required)"""


@dataclass(frozen=True)
class Spec:
    """A random scenario: two ClusterQueues, each on the flavor with a Topology or the plain
    one, in one cohort or not, with a preemption policy and a queueing strategy."""

    quotas: tuple[int, int]
    tas: tuple[bool, bool]
    cohort: bool
    policies: tuple[int, int]
    strategy: str
    jobs: tuple[JobSpec, ...]

    def scenario(self, *extra: b.Doc) -> Scenario:
        topology = {
            "apiVersion": b.KUEUE,
            "kind": "Topology",
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        }
        tas = b.flavor("tas")
        tas["spec"] = {"topologyName": "t", "nodeLabels": {"atoll.dev/node-group": "g"}}
        queues = []
        for i, name in enumerate("ab"):
            spec: dict[str, Any] = {"queueingStrategy": self.strategy}
            policy = POLICIES[self.policies[i]]
            if policy is not None:
                spec["preemption"] = policy
            if self.cohort:
                spec["cohortName"] = "all"
            flavor = "tas" if self.tas[i] else "plain"
            queues.append(b.cluster_queue(name, self.quotas[i], flavor_name=flavor, **spec))
        return b.scenario(
            _nodes(),
            topology,
            tas,
            b.flavor("plain", **{"atoll.dev/node-group": "g"}),
            *queues,
            b.local_queue("la", "a"),
            b.local_queue("lb", "b"),
            b.priority_class("low", 10),
            b.priority_class("high", 1000),
            *(_job(f"j{i}", j) for i, j in enumerate(self.jobs)),
            *extra,
        )


def _job(name: str, spec: JobSpec) -> b.Doc:
    pods, gpus, arrival, minutes, queue, prio, rack = spec
    job = b.job(
        name,
        pods=pods,
        gpus=gpus,
        arrival=arrival,
        duration=f"{minutes}m",
        queue=queue,
        priority=prio,
    )
    if rack:
        job["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    return job


job_specs = st.tuples(
    st.integers(min_value=1, max_value=4),  # pods
    st.sampled_from([1, 2]),  # GPUs per pod
    st.sampled_from([0, 0, 10, 60, 300]),  # arrival
    st.integers(min_value=1, max_value=20),  # minutes
    st.sampled_from(["la", "lb"]),
    st.sampled_from(["low", "high"]),
    st.booleans(),  # rack required
)
specs = st.builds(
    Spec,
    quotas=st.tuples(st.integers(2, 16), st.integers(2, 16)),
    tas=st.tuples(st.booleans(), st.booleans()),
    cohort=st.booleans(),
    policies=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    strategy=st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
    jobs=st.lists(job_specs, min_size=1, max_size=10).map(tuple),
)


def _find(decisions: tuple[d.Decision, ...], key: str) -> d.Decision | None:
    return next((x for x in decisions if x.workload == key), None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs, job_specs, st.sampled_from([0, 10, 60, 300, 900]))
def test_what_if_for_an_added_job_is_the_next_committed_step(
    spec: Spec, extra: JobSpec, at: int
) -> None:
    scn = spec.scenario()
    sim = GangSimulator(scn, Settings(until=at))
    sim.run()
    key = add_job(sim, Job.model_validate(_job("extra", extra)), at)
    now = sw.EPOCH + at
    answer = ask(sim.decider, key, now)
    committed = sim.decider.decide(now)
    assert _find(committed, key) == answer.decision
    assert answer.at_head is not None
    event(f"what-if: {type(answer.at_head).__name__}")


@dataclass
class _Twin:
    """The simulator's Decider, with the operator's Scheduler asked on a copy first."""

    decider: Decider
    fair_sharing: m.FairSharing | None
    steps: list[tuple[tuple[d.Decision, ...], tuple[d.Decision, ...]]] = field(default_factory=list)

    @property
    def parked(self) -> int:
        return self.decider.parked

    def decide(self, now: float) -> tuple[d.Decision, ...]:
        copy = self.decider.fork()
        fake = FakeCluster()
        operator = Scheduler(
            cache=copy.cache,
            store=fake,
            emit=fake.emit,
            clock=lambda: now,
            fair_sharing=self.fair_sharing,
        )
        operator._decision = copy  # the operator's step, remembering what this one does
        expected = operator.decide()
        got = self.decider.decide(now)
        self.steps.append((expected, got))
        return got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_the_operator_step_decides_what_the_simulator_decides(spec: Spec) -> None:
    scn = spec.scenario()
    sim = GangSimulator(scn, Settings())
    twin = _Twin(sim.decider, None)
    sim.decider = twin  # type: ignore[assignment]
    sim.run()
    assert twin.steps
    for expected, got in twin.steps:
        assert expected == got
    kinds = {type(x).__name__ for _, got in twin.steps for x in got}
    for kind in sorted(kinds):
        event(f"operator vs simulator: {kind}")


def _settle(decider: Decider, key: str, now: float) -> bool:
    """The operator's loop at one instant (steps while one progresses or parks heads):
    whether `key` is admitted or preempts."""
    for _ in range(200):
        decisions = decider.decide(now)
        if any(isinstance(x, d.Admit | d.Preempt) and x.workload == key for x in decisions):
            return True
        progress = any(not isinstance(x, d.Pending) for x in decisions)
        if not progress and not decider.parked:
            return False
    raise AssertionError("the loop did not settle")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs, st.sampled_from([10, 60, 300]), st.data())
def test_would_fit_after_x_finishes_is_what_the_step_does_without_x(
    spec: Spec, at: int, data: st.DataObject
) -> None:
    sim = GangSimulator(spec.scenario(), Settings(until=at))
    sim.run()
    now = sw.EPOCH + at
    pending = sorted(k for k, w in sim.cache.workloads.items() if sim.cache.is_pending(w, now))
    if not pending:
        return
    key = data.draw(st.sampled_from(pending))
    ex = explain(sim.cache, key, now, runtime=lambda _: None)
    finish = next((c for c in ex.counterfactuals if c.kind == "finish"), None)
    event(f"finish counterfactual: {finish is not None}")
    if finish is None:
        return
    gone = [w["workload"] for w in finish.detail["workloads"]]
    trial = Decider(sim.cache.fork())
    for g in gone:
        trial.cache.delete_workload(g)
        trial.cache.inventory.forget_gang(g)
    trial.cache.wake_parked()  # a question of room, not of when the batched requeue comes
    assert _settle(trial, key, now), (key, gone)

"""Congested queues: skipping the cycles that would only park their heads again changes no
decision (hypothesis, against the loop that wakes every parked workload and tries it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.cycle import drain, run_cycle
from atoll.engine.ordering import select_heads
from atoll.engine.snapshot import placing
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import SimResult
from atoll.sim.scenario import Scenario
from atoll.state.cache import Cache
from atoll.state.decide import Decider, admission_of
from tests.sim.builders import (
    cluster_queue,
    flavor,
    job,
    local_queue,
    nodes,
    priority_class,
    scenario,
)


class WakeEverything(Decider):
    """The step as it was before queues were kept and no-op cycles skipped: the heads from
    `pending_by_queue` + `select_heads`, every parked workload tried again after a capacity
    change (in the cache's batched requeue, `Cache.requeue_due`, as the step has it), one
    head per queue and cycle."""

    def decide(self, now: float) -> tuple[d.Decision, ...]:
        cache = self.cache
        cache.requeue_due(now)
        snapshot = cache.snapshot(self.fair_sharing)
        heads = select_heads(cache.pending_by_queue(now), cache.parked_keys())
        self.checker.prune()
        placer = self.checker.placer(snapshot)
        placed = run_cycle(placing(snapshot, placer), heads)
        decisions = (*placed, *drain(snapshot))
        self.heads = len(heads)
        self.parked = 0
        for dec in decisions:
            match dec:
                case d.Admit():
                    cache.assume(dec.workload, admission_of(dec))
                    if (placement := placer.placed.get(str(dec.workload))) is not None:
                        cache.inventory.hold(placement)
                case d.Preempt():
                    cache.evicting.update(v.workload for v in dec.victims)
                    cache.preempting(dec.workload, dec.cluster_queue)
                case d.Evict():
                    cache.evicting.add(dec.workload)
                case d.Pending():
                    if dec.requeue is d.Requeue.INADMISSIBLE:
                        cache.park(dec.workload, dec)
                        self.parked += 1
        return decisions


class CheckedHeads(Decider):
    """The step, checking first that the kept queues give the heads `select_heads` gives."""

    def decide(self, now: float) -> tuple[d.Decision, ...]:
        cache = self.cache
        cache.requeue_due(now)  # what `queue_heads` does first
        expected = select_heads(cache.pending_by_queue(now), cache.parked_keys())
        assert [w for _, w in cache.queue_heads(now)] == expected
        return super().decide(now)


@contextmanager
def _heads_again_checked() -> Iterator[None]:
    """Check that each `Cache.queue_heads_again` is called where `queue_heads` at the same
    `now` would find nothing to do before reading the heads (no release, requeue, backoff or
    change to place), and gives what it would (the skip loop's shortcut: only parks
    happened since)."""
    heads, again = Cache.queue_heads, Cache.queue_heads_again
    last: dict[int, float] = {}

    def recorded(self: Cache, now: float) -> list[tuple[str, m.Workload]]:
        last[id(self)] = now
        return heads(self, now)

    def checked(self: Cache) -> list[tuple[str, m.Workload]]:
        now, q = last[id(self)], self.queues
        assert not self.freed
        assert not self.promised_due
        assert not q.dirty
        assert all(at is not None and at > now for at in self.requeues.values())
        assert not q.deferred or q.deferred[0][0] > now
        assert q.version == self._queues_version
        out = again(self)
        assert out == heads(self, now)
        return out

    with (
        patch.object(Cache, "queue_heads", recorded),
        patch.object(Cache, "queue_heads_again", checked),
    ):
        yield


def _run(
    scn: Scenario, fair: bool, decider: type[Decider] | None, until: float | None = None
) -> SimResult:
    fs = m.FairSharing() if fair else None
    sim = GangSimulator(scn, Settings(fair_sharing=fs, until=until))
    if decider is not None:
        sim.decider = decider(sim.cache, fs)
    return sim.run()


def _without_cycles(result: SimResult) -> str:
    doc: dict[str, Any] = result.to_json()
    doc["summary"].pop("cycles")
    return json.dumps(doc, sort_keys=True)


queue_spec = st.fixed_dictionaries(
    {
        "gpus": st.integers(min_value=0, max_value=8),
        "within": st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
        "reclaim": st.sampled_from(["Never", "LowerPriority", "Any"]),
        "strategy": st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
        "cohort": st.booleans(),
    }
)
job_spec = st.tuples(
    st.integers(min_value=0, max_value=2),  # queue
    st.integers(min_value=1, max_value=3),  # pods
    st.sampled_from([1, 1, 2, 4]),  # GPUs per pod
    st.integers(min_value=0, max_value=900),  # arrival
    st.integers(min_value=1, max_value=20),  # minutes
    st.sampled_from(["low", "high"]),
    st.integers(min_value=1, max_value=6),  # copies, one a second
)


def _scenario(queues: list[dict[str, Any]], jobs: list[tuple[int, ...]]) -> Scenario:
    docs: list[Any] = [nodes(4, 4), flavor(), priority_class("low", 10)]
    docs.append(priority_class("high", 1000))
    for i, q in enumerate(queues):
        spec: dict[str, Any] = {
            "queueingStrategy": q["strategy"],
            "preemption": {"withinClusterQueue": q["within"], "reclaimWithinCohort": q["reclaim"]},
        }
        if q["cohort"]:
            spec["cohortName"] = "pool"
        docs += [cluster_queue(f"cq{i}", q["gpus"], **spec), local_queue(f"lq{i}", f"cq{i}")]
    for n, (q, pods, gpus, arrival, minutes, prio, copies) in enumerate(jobs):
        docs.append(
            job(
                f"j{n}",
                pods=pods,
                gpus=gpus,
                arrival=arrival,
                duration=f"{minutes}m",
                queue=f"lq{q % len(queues)}",
                priority=prio,
                **{"atoll.dev/repeat": str(copies), "atoll.dev/repeat-every": "1s"},
            )
        )
    return scenario(*docs)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(queue_spec, min_size=1, max_size=3),
    st.lists(job_spec, min_size=1, max_size=10),
    st.booleans(),
    st.one_of(st.none(), st.integers(min_value=1, max_value=3600)),
)
def test_skipping_no_op_cycles_changes_no_decision(
    queues: list[dict[str, Any]], jobs: list[tuple[int, ...]], fair: bool, until: int | None
) -> None:
    """Same admissions, preemptions, evictions, times and pending reasons (`until` stops
    the run with workloads still pending), in fewer cycles."""
    scn = _scenario(queues, jobs)
    reference = _run(scn, fair, WakeEverything, until)
    with _heads_again_checked():
        result = _run(scn, fair, CheckedHeads, until)
    assert _without_cycles(result) == _without_cycles(reference)
    assert result.cycles <= reference.cycles


def test_a_backlog_costs_a_few_cycles_per_admission() -> None:
    """200 one-GPU Jobs on 6 GPUs: each completion admits the next one, and the 130-odd
    parked behind it are not tried one cycle each."""
    queue = {"gpus": 6, "within": "LowerPriority", "reclaim": "Never"}
    queue |= {"strategy": "BestEffortFIFO", "cohort": False}
    scn = _scenario([queue], [(0, 1, 1, 0, 5 + k, "low", 50) for k in range(4)])
    reference = _run(scn, False, WakeEverything)
    result = _run(scn, False, None)
    assert _without_cycles(result) == _without_cycles(reference)
    admissions = sum(1 + r.evictions for r in result.jobs)
    assert admissions == 200
    assert result.cycles <= 3 * admissions < reference.cycles / 10

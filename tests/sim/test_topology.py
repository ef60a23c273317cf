"""Topology in the simulator: a flavor with a `topologyName` makes the simulated atoll place
gangs on the inventory exactly as the operator does (`state.decide.Decider`), pins their
pods there, and records the domain; gangs it does not place still count on the nodes."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from atoll.api.core import Job
from atoll.cli.simulate_cmd import read_scenario
from atoll.engine import decisions as d
from atoll.sandbox import shapes
from atoll.sim import workloads as sw
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import JobRecord, JobState, SimResult
from atoll.sim.whatif import add_job, what_if
from atoll.state.cache import REQUEUE_BATCH_PERIOD as BATCH
from tests.sim import builders as b

REPO = Path(__file__).resolve().parents[2]
RACK = "topology.atoll.dev/rack"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def _dgx_scenario(*jobs: b.Doc) -> list[b.Doc]:
    """dgx-h100: 16 nodes x 8 GPUs in 4 racks of 4 nodes; one flavor with a Topology and one
    without, over the same nodes."""
    nodes = shapes.nodes(shapes.load_shape(REPO / "examples" / "clusters" / "dgx-h100.yaml"))
    topology = {
        "apiVersion": b.KUEUE,
        "kind": "Topology",
        "metadata": {"name": "dgx"},
        "spec": {
            "levels": [
                {"nodeLabel": "topology.atoll.dev/block"},
                {"nodeLabel": RACK},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }
    tas = b.flavor("tas")
    tas["spec"] = {"topologyName": "dgx", "nodeLabels": {"atoll.dev/node-group": "dgx"}}
    plain_cq = b.cluster_queue("plain", gpus=128, flavor_name="plain")
    plain_cq["spec"]["cohortName"] = "all"
    tas_cq = b.cluster_queue("cq", gpus=128, flavor_name="tas")
    tas_cq["spec"]["cohortName"] = "all"
    return [
        *nodes,
        topology,
        tas,
        b.flavor("plain"),
        tas_cq,
        plain_cq,
        b.local_queue(),
        b.local_queue("plain-q", "plain"),
        *jobs,
    ]


def _rack_job(name: str, pods: int, *, arrival: float = 0, duration: str = "10m") -> b.Doc:
    job = b.job(name, pods=pods, arrival=arrival, duration=duration)
    job["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    return job


def _run(*docs: b.Doc) -> SimResult:
    scn = b.scenario(_dgx_scenario(*docs))
    return GangSimulator(scn, Settings.of(scn.config)).run()


def _jobs(result: SimResult) -> dict[str, object]:
    return {j.name.split("/")[1]: j for j in result.jobs}


def test_rack_required_gangs_each_land_in_one_rack() -> None:
    result = _run(_rack_job("a", 24), _rack_job("b", 24), _rack_job("c", 24))
    jobs = [j for j in result.jobs]
    domains = [j.domain for j in jobs]
    assert all(d is not None and d.startswith("rack=rack-") for d in domains)
    assert len(set(domains)) == 3  # 24 + 24 do not fit in one rack of 32
    assert all(j.started == j.admitted == 0.0 for j in jobs)
    assert all(j.state is JobState.FINISHED for j in jobs)


def test_a_gang_no_rack_can_hold_waits_with_the_reason() -> None:
    result = _run(_rack_job("wide", 40))
    (job,) = result.jobs
    assert job.admitted is None
    assert job.state is JobState.PENDING
    assert job.reason == "TopologyPlacementFailed"


def test_a_gang_no_rack_can_hold_preempts_nobody_for_quota() -> None:
    # Kueue's check on an empty topology: low-priority Jobs take all 128 GPUs of the queue's
    # quota, so quota alone would preempt them for the high-priority 40-pod gang, but no rack
    # holds 40 pods of 1 GPU even with nothing running (a rack has 32): evicting them cannot
    # help. Nobody is evicted, and the gang waits with the topology's reason.
    low = [b.job(f"low-{i}", pods=8, gpus=8, duration="1h", priority="low") for i in range(2)]
    wide = _rack_job("wide", 40, arrival=60)
    wide["metadata"].setdefault("labels", {})["kueue.x-k8s.io/priority-class"] = "high"
    docs = _dgx_scenario(*low, wide, b.priority_class("low", 10), b.priority_class("high", 1000))
    (cq,) = [x for x in docs if x["kind"] == "ClusterQueue" and x["metadata"]["name"] == "cq"]
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    scn = b.scenario(docs)
    jobs = _jobs(GangSimulator(scn, Settings.of(scn.config)).run())
    assert [jobs[f"low-{i}"].evictions for i in range(2)] == [0, 0]  # type: ignore[attr-defined]
    assert jobs["wide"].state is JobState.PENDING  # type: ignore[attr-defined]
    assert jobs["wide"].reason == "TopologyPlacementFailed"  # type: ignore[attr-defined]


def test_gangs_atoll_did_not_place_still_count_on_the_nodes() -> None:
    # 8 pods x 8 GPUs without a topology take 8 whole nodes (two racks); the rack gang that
    # arrives next must go to one of the two free racks, and start at once
    plain = b.job("plain", pods=8, gpus=8, queue="plain-q", duration="1h")
    result = _run(plain, _rack_job("ring", 32, arrival=60))
    ring = next(j for j in result.jobs if j.name.endswith("/ring"))
    plain_nodes_busy = next(j for j in result.jobs if j.name.endswith("/plain"))
    assert plain_nodes_busy.started == 0.0
    assert ring.admitted == 60.0
    assert ring.started == 60.0  # its pinned nodes were really free
    assert ring.domain in {"rack=rack-2", "rack=rack-3"}
    assert ring.evictions == 0


def test_the_racks_example_scenario() -> None:
    scn = read_scenario(REPO / "examples" / "scenarios" / "racks.yaml")
    result = GangSimulator(scn, Settings.of(scn.config)).run()
    jobs = {j.name.split("/")[1]: j for j in result.jobs}
    wide = jobs.pop("too-wide")
    assert (wide.state, wide.reason) == (JobState.PENDING, "TopologyPlacementFailed")
    trains = [j for name, j in jobs.items() if name.startswith("train-")]
    assert len(trains) == 6
    for j in trains:
        assert j.state is JobState.FINISHED
        assert j.domain is not None
        assert j.domain.startswith("rack=")
        assert j.started == j.admitted  # placed whole: no pod waited for room
        assert j.evictions == 0
    # while inference fragments three racks, trainings take turns in the fourth
    serve_end = jobs["serve"].finished
    assert serve_end is not None
    during = sorted(
        (j.admitted or 0, j.finished or 0) for j in trains if (j.admitted or 0) < serve_end
    )
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(during))
    assert result.notes == []


def test_pods_atoll_did_not_place_hold_their_cpu_not_a_thousand_times_it() -> None:
    # 16 pods of 4 CPUs and 1 GPU spread one per node; each node keeps 60 CPUs and 7 GPUs, so
    # a rack gang of 24 one-GPU pods fits any rack (the inventory once read 4 CPUs as 4000)
    plain = b.job("plain", pods=16, gpus=1, queue="plain-q", duration="1h")
    plain["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    result = _run(plain, _rack_job("ring", 24, arrival=60))
    ring = _jobs(result)["ring"]
    assert isinstance(ring, JobRecord)
    assert (ring.admitted, ring.started, ring.reason) == (60.0, 60.0, None)


def test_what_if_sees_the_free_gpus_of_racks_with_inference_pods() -> None:
    # at 90 s, inference holds 2 GPUs on each of 12 nodes (three racks keep 24 free GPUs
    # each) and train-0 one rack: 24 one-GPU pods required in one rack fit now
    scn = read_scenario(REPO / "examples" / "scenarios" / "racks.yaml")
    probe = _rack_job("probe", 24)
    probe["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "training"
    del probe["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    answer = what_if(scn, Job.model_validate(probe), at=90)
    assert isinstance(answer.decision, d.Admit), answer.describe()


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_a_strict_fifo_head_that_no_rack_holds_blocks_its_queue(strategy: str) -> None:
    # four racks of 32 GPUs, each with 20 taken for an hour: a 16-pod rack-required gang fits
    # the quota (96 of 128 GPUs) but no rack. As Kueue's StrictFIFO, it stays at the head and
    # the small Job behind it waits; BestEffortFIFO parks it and admits the small Job.
    fill = [_rack_job(f"fill-{i}", 20, duration="60m") for i in range(4)]
    docs = _dgx_scenario(*fill, _rack_job("big", 16, arrival=1), b.job("small", pods=4, arrival=2))
    for doc in docs:
        if doc["kind"] == "ClusterQueue" and doc["metadata"]["name"] == "cq":
            doc["spec"]["queueingStrategy"] = strategy
    scn = b.scenario(docs)
    jobs = _jobs(GangSimulator(scn, Settings.of(scn.config)).run())
    big, small = jobs["big"], jobs["small"]
    assert isinstance(big, JobRecord)
    assert isinstance(small, JobRecord)
    # when the fillers end (BestEffortFIFO parked it: woken by the batched requeue)
    assert big.admitted == 3600.0 + (BATCH if strategy == "BestEffortFIFO" else 0.0)
    if strategy == "StrictFIFO":
        assert small.admitted is not None
        assert small.admitted >= big.admitted
    else:
        assert small.admitted == 2.0


def test_a_gang_placement_turns_down_takes_no_quota_from_the_heads_after_it() -> None:
    # 80 of the 128 GPUs of `cq` run, 20 in each rack. In one step, a 16-pod rack-required
    # gang of `cq` fits the quota but no rack, and a 40-pod Job of `other` borrows from `cq`:
    # the gang placement turned down counts for nothing, so the Job is admitted in this step.
    other = b.cluster_queue("other", gpus=0, flavor_name="tas")
    other["spec"]["cohortName"] = "all"
    fill = [_rack_job(f"fill-{i}", 20, duration="60m") for i in range(4)]
    scn = b.scenario(_dgx_scenario(*fill, other, b.local_queue("other-q", "other")))
    sim = GangSimulator(scn, Settings(until=1))
    sim.run()
    gang = add_job(sim, Job.model_validate(_rack_job("gang", 16, arrival=1)), 1)
    borrower = add_job(sim, Job.model_validate(b.job("borrower", pods=40, queue="other-q")), 1)
    decisions = {str(x.workload): x for x in sim.decider.decide(sw.EPOCH + 1)}
    assert isinstance(decisions[gang], d.Pending)
    assert decisions[gang].reason is d.PendingReason.TOPOLOGY_PLACEMENT_FAILED
    assert isinstance(decisions[borrower], d.Admit)

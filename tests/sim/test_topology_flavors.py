"""Two flavors with a topology in one ClusterQueue: a gang that the first flavor's topology
cannot place is placed in the second (`engine.topologyflavors`), through the same step the
operator runs; when neither can place it, it waits with each flavor's reason."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import JobRecord, JobState
from atoll.state import decide
from tests.sim import builders as b

RACK = "topology.atoll.dev/rack"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def _nodes(group: str, racks: int, per_rack: int) -> list[b.Doc]:
    """`racks` racks of `per_rack` nodes of 8 GPUs, labelled with node group and rack."""
    out = b.nodes(racks * per_rack, 8, group=group)
    for i, node in enumerate(out):
        node["metadata"]["labels"][RACK] = f"{group}-rack-{i // per_rack}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = node["metadata"]["name"]
    return out


def _flavor(name: str) -> b.Doc:
    doc = b.flavor(name)
    doc["spec"] = {"topologyName": "racks", "nodeLabels": {"atoll.dev/node-group": name}}
    return doc


def _run(*jobs: b.Doc) -> dict[str, JobRecord]:
    """Flavor `small` (two racks of two nodes) before flavor `big` (one rack of four), each
    with quota for 64 GPUs (more than its nodes have: topology is what refuses)."""
    cq = b.cluster_queue("cq", gpus=64, flavor_name="small")
    group = cq["spec"]["resourceGroups"][0]
    big = {**group["flavors"][0], "name": "big"}
    group["flavors"].append(big)
    topology = {
        "apiVersion": b.KUEUE,
        "kind": "Topology",
        "metadata": {"name": "racks"},
        "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }
    docs = [
        *_nodes("small", 2, 2),
        *_nodes("big", 1, 4),
        topology,
        _flavor("small"),
        _flavor("big"),
        cq,
        b.local_queue(),
        *jobs,
    ]
    scn = b.scenario(docs)
    result = GangSimulator(scn, Settings.of(scn.config)).run()
    return {j.name.split("/")[1]: j for j in result.jobs}


def _rack_job(name: str, pods: int) -> b.Doc:
    job = b.job(name, pods=pods, gpus=8)
    job["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    return job


def test_a_gang_no_rack_of_the_first_flavor_holds_lands_in_the_second() -> None:
    jobs = _run(_rack_job("four", 4))
    assert jobs["four"].flavor == "big"
    assert jobs["four"].domain == "rack=big-rack-0"
    assert jobs["four"].state is JobState.FINISHED


def test_a_gang_that_fits_the_first_flavor_stays_there() -> None:
    jobs = _run(_rack_job("two", 2))
    assert jobs["two"].flavor == "small"


def test_a_gang_no_flavor_holds_names_each_flavors_reason() -> None:
    jobs = _run(_rack_job("six", 6))
    six = jobs["six"]
    assert six.state is JobState.PENDING
    assert six.reason == "TopologyPlacementFailed"
    assert six.message is not None
    assert "flavor small: pod set main needs 6" in six.message
    assert "flavor big: pod set main needs 6" in six.message


def _counting_cycles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the engine cycles the step runs (each call of `run_cycle`, with its heads)."""
    calls: list[int] = []
    original = decide.run_cycle

    def counted(snapshot: Any, heads: Any, *args: Any, **kwargs: Any) -> Any:
        heads = list(heads)
        calls.append(len(heads))
        return original(snapshot, heads, *args, **kwargs)

    monkeypatch.setattr(decide, "run_cycle", counted)
    return calls


def test_identical_gangs_no_topology_places_are_not_tried_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting_cycles(monkeypatch)
    jobs = _run(*(_rack_job(f"six-{i}", 6) for i in range(30)))
    assert all(j.reason == "TopologyPlacementFailed" for j in jobs.values())
    assert len({j.message for j in jobs.values()}) == 1
    # one cycle finds that the class fails in placement; the 29 others are parked with it
    assert len(calls) < 30 // 2


def test_a_placement_failure_is_not_reused_once_the_inventory_changes() -> None:
    # each four-pod gang needs the one big rack: they run one after the other
    jobs = _run(*(_rack_job(f"four-{i}", 4) for i in range(5)))
    assert {j.flavor for j in jobs.values()} == {"big"}
    assert all(j.state is JobState.FINISHED for j in jobs.values())

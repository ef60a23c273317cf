"""Published NVLink islands on device-plugin nodes: how many GPUs of each island are free, and
island-bound gangs (`atoll.dev/nvlink-island: required`) placed only where one island holds
each pod's GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.agent.gputopology import published
from atoll.agent.nvidiasmi import parse
from atoll.api.core import Node, Pod
from atoll.api.islands import ISLANDS_ANNOTATION
from atoll.api.workload import PodSet
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Islands,
    NoFit,
    Placement,
    give_to_islands,
    take_from_islands,
)
from atoll.engine.placement import place
from atoll.state.gangs import GangError, gang_pod_set
from atoll.state.inventory import ClusterInventory
from atoll.state.islands import GPU_RESOURCE
from tests.conftest import REPO
from tests.engine.placement_builders import compiler

FIXTURES = REPO / "examples" / "nvidia-smi"


def _annotation(fixture: str) -> str:
    return published(parse((FIXTURES / fixture).read_text())).annotation()


def _node(name: str, gpus: int, fixture: str | None = None, **annotations: str) -> Node:
    ann = dict(annotations)
    if fixture:
        ann[ISLANDS_ANNOTATION] = _annotation(fixture)
    res = {"cpu": "32", "memory": "128Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    return Node.from_dict(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name},
                "annotations": ann,
            },
            "status": {"capacity": res, "allocatable": res},
        }
    )


def _running(name: str, node: str, gpus: int) -> Pod:
    return Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": {GPU_RESOURCE: str(gpus)}}}],
            },
            "status": {"phase": "Running"},
        }
    )


def _inventory(*nodes: Node) -> ClusterInventory:
    inv = ClusterInventory()
    for n in nodes:
        inv.upsert_node(n)
    return inv


def _gang(pods: int, gpus: int, *, island: bool = True) -> Gang:
    ps = GangPodSet(
        name="main",
        count=pods,
        requests=((GPU_RESOURCE, gpus),),
        island_resource=GPU_RESOURCE if island else None,
    )
    return Gang(key="ns/wl", pod_sets=(ps,))


def test_take_from_islands_is_best_fit() -> None:
    assert take_from_islands((2, 1, 2), 1) == ((2, 0, 2), 1)
    assert take_from_islands((2, 1, 2), 2) == ((0, 1, 2), 0)
    assert take_from_islands((2, 1, 2), 4) == ((0, 0, 1), None)


def test_give_to_islands_returns_units_to_their_island_else_the_emptiest() -> None:
    isl = Islands(resource=GPU_RESOURCE, sizes=(2, 2, 4), free=(0, 1, 4))
    assert give_to_islands(isl, isl.free, 2, 0) == (2, 1, 4)
    assert give_to_islands(isl, isl.free, 1, None) == (1, 1, 4)
    assert give_to_islands(isl, isl.free, 3, None) == (2, 2, 4)


def test_free_islands_count_running_pods_into_the_tightest_island() -> None:
    inv = _inventory(_node("a6000", 4, "rtx-a6000-2-pairs.txt"))
    inv.upsert_pod(_running("p", "a6000", 1))
    islands = inv.snapshot().by_name["a6000"].islands
    assert islands is not None
    assert islands.sizes == (2, 2)
    assert islands.free == (1, 2)


@pytest.mark.parametrize(
    ("pods", "gpus", "fits"),
    [
        pytest.param(1, 2, True, id="one-pair"),
        pytest.param(2, 2, True, id="both-pairs"),
        pytest.param(1, 4, False, id="four-in-one-island"),
        pytest.param(2, 3, False, id="three-in-one-island"),
    ],
)
def test_island_bound_pods_need_one_island_each(pods: int, gpus: int, fits: bool) -> None:
    inv = _inventory(_node("a6000", 4, "rtx-a6000-2-pairs.txt")).snapshot()
    got = place(inv, _gang(pods, gpus))
    assert isinstance(got, Placement) is fits


def test_without_the_annotation_four_gpus_fit_across_islands() -> None:
    inv = _inventory(_node("a6000", 4, "rtx-a6000-2-pairs.txt")).snapshot()
    assert isinstance(place(inv, _gang(1, 4, island=False)), Placement)


def test_the_reason_says_the_largest_free_island() -> None:
    inv = _inventory(_node("lab", 2, "lab-2x3090.txt"), _node("a6000", 4, "rtx-a6000-2-pairs.txt"))
    got = place(inv.snapshot(), _gang(1, 4))
    assert isinstance(got, NoFit)
    assert got.largest_island == 2
    assert "each pod needs 4 nvidia.com/gpu in one NVLink island" in got.message
    assert "the largest free island has 2 (a6000)" in got.message


def test_a_running_pod_breaks_a_pair() -> None:
    inv = _inventory(_node("a6000", 4, "rtx-a6000-2-pairs.txt"))
    inv.upsert_pod(_running("p", "a6000", 1))
    assert isinstance(place(inv.snapshot(), _gang(1, 2)), Placement)
    assert isinstance(place(inv.snapshot(), _gang(2, 2)), NoFit)


def test_held_gang_keeps_the_island_it_was_placed_in() -> None:
    inv = _inventory(_node("dgx", 8, "dgx-h100.txt"), _node("lab", 2, "lab-2x3090.txt"))
    first = place(inv.snapshot(), _gang(1, 2))
    assert isinstance(first, Placement)
    assert first.pods[0].node == "lab"  # best fit: the small island, the big one stays whole
    assert first.pods[0].island == 0
    inv.hold(first)
    islands = inv.snapshot().by_name["lab"].islands
    assert islands is not None
    assert islands.free == (0,)
    eight = place(inv.snapshot(), _gang(1, 8))
    assert isinstance(eight, Placement)
    assert eight.pods[0].node == "dgx"


def test_nodes_without_published_islands_do_not_take_island_bound_pods() -> None:
    got = place(_inventory(_node("plain", 8)).snapshot(), _gang(1, 2))
    assert isinstance(got, NoFit)
    assert "no eligible node publishes its islands" in got.message


def test_a_broken_annotation_is_reported_and_ignored() -> None:
    inv = _inventory(_node("bad", 2, **{ISLANDS_ANNOTATION: '{"islands": [{"gpus": []}]}'}))
    assert inv.snapshot().by_name["bad"].islands is None
    err = inv.published_islands()["bad"]
    assert "node bad: annotation atoll.dev/nvlink-islands: islands.0.gpus" in str(err)


def _pod_set(annotation: str | None, gpus: int = 2) -> PodSet:
    template: dict[str, Any] = {
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {GPU_RESOURCE: str(gpus)}}}]
        }
    }
    if annotation is not None:
        template["metadata"] = {"annotations": {"atoll.dev/nvlink-island": annotation}}
    return PodSet.model_validate({"name": "main", "count": 1, "template": template})


def _convert(ps: PodSet) -> GangPodSet:
    return gang_pod_set(ps, templates={}, compiler=compiler(), inventory=ClusterInventory())


def test_the_pod_template_annotation_asks_for_one_island() -> None:
    assert _convert(_pod_set("required")).island_resource == GPU_RESOURCE
    assert _convert(_pod_set(None)).island_resource is None


@pytest.mark.parametrize(
    ("ps", "message"),
    [
        pytest.param(_pod_set("preferred"), "'preferred' is not supported", id="value"),
        pytest.param(
            _pod_set("required", gpus=0), "the pods request no nvidia.com/gpu", id="no-gpu"
        ),
    ],
)
def test_bad_island_annotations_say_why(ps: PodSet, message: str) -> None:
    with pytest.raises(GangError, match=message):
        _convert(ps)

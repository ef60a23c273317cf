"""Kueue's TAS annotations → a pod set's topologyRequest; the podset group rules of Kueue's
webhook (a leader and its workers asking for one level), and what placement reads from it."""

from __future__ import annotations

import pytest

from atoll.api import topology as t
from atoll.api.core import PodTemplateSpec
from atoll.api.jobset import JobSet
from atoll.api.workload import PodSet
from atoll.control import jobframework as jf
from atoll.control import jobset as js
from atoll.engine.inventory import TopologyMode
from atoll.state import convert, tas
from atoll.state.gangs import topology_request

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"


def template(**annotations: str) -> PodTemplateSpec:
    return PodTemplateSpec.model_validate(
        {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )


def pod_set(name: str, count: int, **annotations: str) -> PodSet:
    tpl = template(**annotations)
    return PodSet(
        name=name,
        count=count,
        template=tpl,
        topology_request=tas.podset_topology_request(tpl),
    )


def test_group_name_is_read_with_a_required_level() -> None:
    req = tas.podset_topology_request(
        template(**{t.PODSET_REQUIRED_TOPOLOGY: RACK, t.PODSET_GROUP_NAME: "team"})
    )
    assert req is not None
    assert (req.required, req.pod_set_group_name) == (RACK, "team")
    engine = topology_request(req, "default")
    assert engine is not None
    assert (engine.mode, engine.level, engine.group) == (TopologyMode.REQUIRED, RACK, "team")


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        pytest.param({t.PODSET_GROUP_NAME: "g"}, "neither", id="no-level"),
        pytest.param(
            {t.PODSET_UNCONSTRAINED_TOPOLOGY: "true", t.PODSET_GROUP_NAME: "g"},
            "neither",
            id="unconstrained",
        ),
        pytest.param(
            {t.PODSET_REQUIRED_TOPOLOGY: RACK, t.PODSET_GROUP_NAME: "42"},
            "must not be a number",
            id="number",
        ),
        pytest.param(
            {
                t.PODSET_REQUIRED_TOPOLOGY: BLOCK,
                t.PODSET_SLICE_REQUIRED_TOPOLOGY: RACK,
                t.PODSET_SLICE_SIZE: "2",
                t.PODSET_GROUP_NAME: "g",
            },
            t.PODSET_SLICE_SIZE,
            id="slices",
        ),
    ],
)
def test_invalid_group_annotation_is_an_error_naming_it(
    annotations: dict[str, str], says: str
) -> None:
    with pytest.raises(tas.TopologyAnnotationError) as e:
        tas.podset_topology_request(template(**annotations))
    assert t.PODSET_GROUP_NAME in str(e.value)
    assert says in str(e.value)


GROUP_RACK = {t.PODSET_REQUIRED_TOPOLOGY: RACK, t.PODSET_GROUP_NAME: "g"}


@pytest.mark.parametrize(
    ("pod_sets", "says"),
    [
        pytest.param([pod_set("leader", 1, **GROUP_RACK), pod_set("w", 4, **GROUP_RACK)], None),
        pytest.param([pod_set("leader", 1, **GROUP_RACK)], "exactly 2 pod sets, got 1"),
        pytest.param(
            [
                pod_set("a", 1, **GROUP_RACK),
                pod_set("b", 1, **GROUP_RACK),
                pod_set("c", 1, **GROUP_RACK),
            ],
            "exactly 2 pod sets, got 3",
        ),
        pytest.param([pod_set("a", 2, **GROUP_RACK), pod_set("b", 4, **GROUP_RACK)], "got 2 and 4"),
        pytest.param(
            [
                pod_set("leader", 1, **GROUP_RACK),
                pod_set("w", 4, **{t.PODSET_PREFERRED_TOPOLOGY: RACK, t.PODSET_GROUP_NAME: "g"}),
            ],
            "same required or preferred level",
        ),
    ],
)
def test_podset_group_rules(pod_sets: list[PodSet], says: str | None) -> None:
    errors = tas.podset_group_errors(pod_sets)
    if says is None:
        assert errors == []
    else:
        assert len(errors) == 1
        assert says in errors[0]
        assert "'g'" in errors[0]


def jobset(leader_annotations: dict[str, str], worker_annotations: dict[str, str]) -> JobSet:
    def rj(name: str, replicas: int, annotations: dict[str, str]) -> dict[str, object]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {"containers": [{"name": "c", "image": "x"}]},
                    }
                }
            },
        }

    return JobSet.from_dict(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "lw", "namespace": "ns", "uid": "u1"},
            "spec": {
                "replicatedJobs": [
                    rj("leader", 1, leader_annotations),
                    rj("workers", 3, worker_annotations),
                ]
            },
        }
    )


def test_a_jobset_leader_and_workers_carry_the_group_into_the_workload() -> None:
    wl = js.build_workload(jobset(GROUP_RACK, GROUP_RACK), {}, {})
    groups = [
        ps.topology_request.pod_set_group_name if ps.topology_request else None
        for ps in wl.spec.pod_sets
    ]
    assert groups == ["g", "g"]
    engine = convert.workload(wl, namespace_labels={}, queued_at=0.0)
    assert [ps.group for ps in engine.pod_sets] == ["g", "g"]  # one flavor for both


def test_a_jobset_with_a_lone_group_member_gets_no_workload() -> None:
    with pytest.raises(jf.ComposeError) as e:
        js.build_workload(jobset(GROUP_RACK, {t.PODSET_REQUIRED_TOPOLOGY: RACK}), {}, {})
    assert e.value.reason == "ErrWorkloadCompose"
    assert "exactly 2 pod sets" in str(e.value)

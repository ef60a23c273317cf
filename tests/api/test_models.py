"""The API models: round trips, Kueue's defaults, unknown fields, and the helpers on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from atoll.api import (
    ClusterQueue,
    Cohort,
    Job,
    LabelSelector,
    LocalQueue,
    Quantity,
    ResourceClaimTemplate,
    ResourceFlavor,
    ResourceSlice,
    Topology,
    UnknownKindError,
    Workload,
    WorkloadPriorityClass,
    parse_object,
    parse_quantity,
)
from atoll.api.clusterqueue import (
    FlavorFungibilityPolicy,
    QueueingStrategy,
    ReclaimWithinCohortPolicy,
    StopPolicy,
    WithinClusterQueuePolicy,
)
from atoll.api.core import Taint, Toleration
from atoll.api.meta import KubeObject
from tests.api.builders import (
    NOT_MANIFESTS,
    cluster_queue,
    cohort,
    cpu_group,
    flavor,
    group,
    local_queue,
    pod_set,
    priority_class,
    quota,
    resource_flavor,
    topology,
    workload,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DOCS = [
    pytest.param(
        doc, id=f"{path.relative_to(REPO / 'examples')}:{doc['kind']}/{doc['metadata']['name']}"
    )
    for path in sorted((REPO / "examples").rglob("*.yaml"))
    if path.relative_to(REPO / "examples").parts[0] not in NOT_MANIFESTS
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]


@pytest.mark.parametrize("raw", EXAMPLE_DOCS)
def test_example_round_trips(raw: dict[str, Any]) -> None:
    once = parse_object(raw)
    again = parse_object(once.to_dict())
    assert again == once
    assert again.to_dict() == once.to_dict()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            cluster_queue(
                cohortName="c", resourceGroups=[cpu_group(cpu="1.5", borrowingLimit="2k")]
            ),
            id="clusterqueue",
        ),
        pytest.param(
            local_queue(stopPolicy="Hold", fairSharing={"weight": "0.5"}), id="localqueue"
        ),
        pytest.param(cohort(parentName="p", fairSharing={"weight": 2}), id="cohort"),
        pytest.param(topology("t", "block", "kubernetes.io/hostname"), id="topology"),
        pytest.param(priority_class(value=-5, description="low"), id="priorityclass"),
        pytest.param(
            workload(pod_sets=[pod_set("a", 3, minCount=2), pod_set("b")], priority=3),
            id="workload",
        ),
    ],
)
def test_builder_manifest_round_trips(raw: dict[str, Any]) -> None:
    once = parse_object(raw)
    assert parse_object(once.to_dict()) == once


def test_cluster_queue_defaults_are_kueues() -> None:
    spec = ClusterQueue.from_dict(cluster_queue()).spec
    assert spec.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert spec.stop_policy is StopPolicy.NONE
    assert spec.flavor_fungibility.when_can_borrow is FlavorFungibilityPolicy.MAY_STOP_SEARCH
    assert spec.flavor_fungibility.when_can_preempt is FlavorFungibilityPolicy.TRY_NEXT_FLAVOR
    assert spec.flavor_fungibility.preference is None
    assert spec.preemption.within_cluster_queue is WithinClusterQueuePolicy.NEVER
    assert spec.preemption.reclaim_within_cohort is ReclaimWithinCohortPolicy.NEVER
    assert spec.preemption.borrow_within_cohort.policy == "Never"
    assert spec.cohort_name is None
    quota = spec.resource_groups[0].flavors[0].resources[0]
    assert (quota.borrowing_limit, quota.lending_limit) == (None, None)


def test_fair_sharing_weight_defaults_to_one() -> None:
    spec = ClusterQueue.from_dict(cluster_queue(fairSharing={})).spec
    assert spec.fair_sharing is not None
    assert spec.fair_sharing.weight == Quantity.from_units(1)


def test_other_kinds_defaults_are_kueues() -> None:
    assert LocalQueue.from_dict(local_queue()).spec.stop_policy is StopPolicy.NONE
    wl = Workload.from_dict(workload(pod_sets=[{"template": {"spec": {}}}])).spec
    assert (wl.pod_sets[0].name, wl.pod_sets[0].count, wl.active) == ("main", 1, True)
    assert ResourceFlavor.from_dict(resource_flavor()).spec.node_labels is None


def test_omitted_namespace_selector_selects_nothing_and_empty_selects_all() -> None:
    labels = {"kubernetes.io/metadata.name": "team-a"}
    omitted = cluster_queue()
    del omitted["spec"]["namespaceSelector"]
    assert not ClusterQueue.from_dict(omitted).spec.selects_namespace(labels)
    assert ClusterQueue.from_dict(cluster_queue(namespaceSelector={})).spec.selects_namespace(
        labels
    )


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param({}, {}, True, id="empty-matches-all"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "a"}, True, id="label-equal"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "b"}, False, id="label-differs"),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {"team": "a"},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {}, False, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
            {},
            True,
            id="does-not-exist",
        ),
    ],
)
def test_label_selector_matches(
    selector: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    assert LabelSelector.from_dict(selector).matches(labels) is matches


def test_reading_ignores_unknown_fields_and_writing_omits_them() -> None:
    raw = cluster_queue(futureField={"x": 1})
    raw["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["futureLimit"] = 3
    raw["status"] = {"futureStatus": True, "pendingWorkloads": 2}
    cq = ClusterQueue.from_dict(raw)
    written = cq.to_dict()
    assert "futureField" not in written["spec"]
    assert "futureLimit" not in written["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert written["status"] == {
        "pendingWorkloads": 2,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
    }


def test_pod_template_keeps_every_field() -> None:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/atoll/sleep:1",
                    "command": ["sleep", "1"],
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 1}},
                }
            ],
        },
    }
    wl = Workload.from_dict(workload(pod_sets=[pod_set(template=template)]))
    written = wl.to_dict()["spec"]["podSets"][0]["template"]
    assert written["spec"]["volumes"] == template["spec"]["volumes"]
    assert written["spec"]["containers"][0]["command"] == ["sleep", "1"]
    assert written["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert written["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_job_exposes_requests_as_quantities() -> None:
    raw = yaml.safe_load((REPO / "examples" / "quickstart" / "job.yaml").read_text())
    job = Job.from_dict(raw)
    requests = job.spec.template.spec.containers[0].resources
    assert requests is not None
    assert requests.requests is not None
    assert requests.requests["memory"] == Quantity.from_units(200 * 1024**2)
    assert job.spec.parallelism == 3
    assert job.metadata.labels == {"kueue.x-k8s.io/queue-name": "user-queue"}


def test_models_are_frozen() -> None:
    cq = ClusterQueue.from_dict(cluster_queue())
    with pytest.raises(ValidationError, match="frozen"):
        cq.spec = cq.spec  # type: ignore[misc]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param(cluster_queue(queueingStrategy="FIFO"), "queueingStrategy", id="enum"),
        pytest.param(
            cluster_queue(resourceGroups=[cpu_group(cpu="lots")]), "nominalQuota", id="quantity"
        ),
        pytest.param(
            cluster_queue(resourceGroups=[cpu_group()] * 17), "resourceGroups", id="max-items"
        ),
        pytest.param(
            workload(pod_sets=[pod_set(f"p{i}") for i in range(19)]), "podSets", id="podsets"
        ),
        pytest.param(priority_class(value=2**31), "value", id="int32"),
    ],
)
def test_invalid_object_fails_to_parse_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        parse_object(raw)


def test_parse_object_picks_the_model_and_rejects_unknown_kinds() -> None:
    assert isinstance(parse_object(topology()), Topology)
    assert isinstance(parse_object(priority_class()), WorkloadPriorityClass)
    assert isinstance(parse_object(cohort()), Cohort)
    with pytest.raises(UnknownKindError, match="Deployment"):
        parse_object({"apiVersion": "apps/v1", "kind": "Deployment"})


def test_to_dict_fills_api_version_and_kind() -> None:
    body = ClusterQueue().to_dict()
    assert (body["apiVersion"], body["kind"]) == ("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert isinstance(ClusterQueue(), KubeObject)


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        pytest.param(
            {"key": "spot", "operator": "Exists"},
            {"key": "spot", "effect": "NoSchedule"},
            True,
            id="exists",
        ),
        pytest.param(
            {"key": "spot", "value": "true"},
            {"key": "spot", "value": "true", "effect": "NoSchedule"},
            True,
            id="equal",
        ),
        pytest.param(
            {"key": "spot", "value": "false"},
            {"key": "spot", "value": "true", "effect": "NoSchedule"},
            False,
            id="value-differs",
        ),
        pytest.param(
            {"operator": "Exists"}, {"key": "any", "effect": "NoExecute"}, True, id="wildcard"
        ),
        pytest.param(
            {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
            {"key": "spot", "effect": "NoSchedule"},
            False,
            id="effect-differs",
        ),
    ],
)
def test_toleration_tolerates_taint(
    toleration: dict[str, Any], taint: dict[str, Any], tolerated: bool
) -> None:
    assert Toleration.from_dict(toleration).tolerates(Taint.from_dict(taint)) is tolerated


def test_dra_claim_template_reads_match_attribute() -> None:
    docs = list(yaml.safe_load_all((REPO / "examples" / "dra" / "setup.yaml").read_text()))
    template = ResourceClaimTemplate.from_dict(
        next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
    )
    devices = template.spec.spec.devices
    assert devices.requests is not None
    assert devices.constraints is not None
    exactly = devices.requests[0].exactly
    assert exactly is not None
    assert (exactly.device_class_name, exactly.count) == (
        "gpu.atoll.dev",
        2,
    )
    assert devices.constraints[0].match_attribute == "gpu.atoll.dev/island"


def test_resource_slice_attributes_keep_their_type() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0"},
        "spec": {
            "driver": "gpu.atoll.dev",
            "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-0",
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"gpu.atoll.dev/island": {"int": 1}, "uuid": {"string": "u"}},
                    "capacity": {"memory": {"value": "40Gi"}},
                }
            ],
        },
    }
    rs = ResourceSlice.from_dict(raw)
    device = (rs.spec.devices or ())[0]
    assert device.attributes is not None
    assert device.capacity is not None
    assert device.attributes["gpu.atoll.dev/island"].value == 1
    assert device.attributes["uuid"].value == "u"
    assert device.capacity["memory"].value == Quantity.from_units(40 * 1024**3)
    assert (
        rs.to_dict()["spec"]["devices"][0]["attributes"] == raw["spec"]["devices"][0]["attributes"]
    )


_NAMES = st.from_regex(r"\A[a-z][a-z0-9]{0,8}\Z")
_QUANTITIES = st.one_of(
    st.integers(min_value=0, max_value=10**6),
    st.builds(
        lambda n, s: f"{n}{s}", st.integers(0, 10**6), st.sampled_from(["", "m", "k", "Mi", "Gi"])
    ),
)


@st.composite
def _cluster_queues(draw: st.DrawFn) -> dict[str, Any]:
    resources = draw(st.lists(_NAMES, min_size=1, max_size=3, unique=True))
    flavors = draw(st.lists(_NAMES, min_size=1, max_size=3, unique=True))
    cohort_name = draw(st.none() | _NAMES)
    limits = {} if cohort_name is None else {"borrowingLimit": draw(_QUANTITIES)}
    groups = [
        group(
            resources,
            *(
                flavor(f, *(quota(r, draw(_QUANTITIES), **limits) for r in resources))
                for f in flavors
            ),
        )
    ]
    spec: dict[str, Any] = {"resourceGroups": groups}
    if cohort_name is not None:
        spec["cohortName"] = cohort_name
    spec["queueingStrategy"] = draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"]))
    return cluster_queue(draw(_NAMES), **spec)


@settings(deadline=None)  # parsing time varies on a loaded machine; no timing asserted
@given(_cluster_queues())
def test_cluster_queue_parse_dump_parse_is_identity(raw: dict[str, Any]) -> None:
    once = ClusterQueue.from_dict(raw)
    dumped = once.to_dict()
    assert ClusterQueue.from_dict(dumped) == once
    assert ClusterQueue.from_dict(yaml.safe_load(yaml.safe_dump(dumped))).to_dict() == dumped
    sent = raw["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert once.spec.resource_groups[0].flavors[0].resources[0].nominal_quota == parse_quantity(
        sent
    )


def test_parsed_models_share_their_set_field_names_and_copies_do_not_leak_into_them() -> None:
    def workload(name: str) -> Workload:
        return Workload.from_dict(
            {
                "metadata": {"name": name, "namespace": "ns", "labels": {"a": "b"}},
                "spec": {
                    "queueName": "q",
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "c", "image": "x"}],
                                }
                            },
                        }
                    ],
                },
            }
        )

    one, two = workload("one"), workload("two")
    assert one.metadata.model_fields_set is two.metadata.model_fields_set
    pod = one.spec.pod_sets[0].template.spec
    assert pod.model_fields_set is two.spec.pod_sets[0].template.spec.model_fields_set
    assert pod.model_fields_set == {"containers", "restartPolicy"}

    copied = one.model_copy(update={"status": None})
    meta = one.metadata.model_copy(update={"resource_version": "7"})
    assert copied.model_fields_set == {"metadata", "spec", "status"}
    assert meta.model_fields_set == {"name", "namespace", "labels", "resource_version"}
    assert two.model_fields_set == {"metadata", "spec"}
    assert two.metadata.model_fields_set == {"name", "namespace", "labels"}
    assert two.metadata.model_dump(exclude_unset=True) == {
        "name": "two",
        "namespace": "ns",
        "labels": {"a": "b"},
    }
    with pytest.raises(ValidationError):
        two.metadata.name = "three"  # type: ignore[misc]
    assert two.metadata.model_fields_set == {"name", "namespace", "labels"}

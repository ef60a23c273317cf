"""Kueue's v1beta1 and its conversion to and from v1beta2 (`atoll.api.v1beta1`): each field
Kueue's apis/kueue/v1beta1/*_conversion.go converts for the queue kinds, what is kept
(metadata, unknown fields), errors that name the field, any input (hypothesis), round trips
(hypothesis), the v1beta1 schemas, and the ConversionReview the webhook answers. Workloads are
served in v1beta2 only."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from atoll.api import crdgen, v1beta1
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.localqueue import LocalQueue
from atoll.kube.admission import AdmissionServer, BadReviewError, convert_review
from atoll.state.apivalidation import check_object

UP, DOWN = v1beta1.V1BETA2, v1beta1.V1BETA1
META = {"name": "x", "namespace": "ns", "uid": "u-1", "resourceVersion": "7", "labels": {"a": "b"}}


def _obj(kind: str, api: str = DOWN, **parts: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": copy.deepcopy(META), **parts}


# ---------------------------------------------------------------------------- ClusterQueue


def test_a_v1beta1_cluster_queue_goes_up_as_kueue_converts_it() -> None:
    cq = _obj(
        "ClusterQueue",
        spec={
            "cohort": "team",
            "admissionChecks": ["prov", "mk"],
            "admissionChecksStrategy": {"admissionChecks": [{"name": "ignored"}]},
            "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
            "queueingStrategy": "StrictFIFO",
        },
        status={
            "pendingWorkloads": 3,
            "pendingWorkloadsStatus": {"clusterQueuePendingWorkload": []},
            "fairSharing": {"weightedShare": 5, "admissionFairSharingStatus": {}},
        },
    )
    out = v1beta1.convert(cq, UP)
    assert out == {
        "apiVersion": UP,
        "kind": "ClusterQueue",
        "metadata": META,
        "spec": {
            "cohortName": "team",
            "admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}, {"name": "mk"}]},
            "flavorFungibility": {
                "whenCanBorrow": "MayStopSearch",
                "whenCanPreempt": "MayStopSearch",
            },
            "queueingStrategy": "StrictFIFO",
        },
        "status": {"pendingWorkloads": 3, "fairSharing": {"weightedShare": 5}},
    }
    assert cq["spec"]["cohort"] == "team"  # the input is not changed


def test_a_cluster_queue_goes_down_with_spec_cohort() -> None:
    cq = _obj(
        "ClusterQueue",
        api=UP,
        spec={
            "cohortName": "team",
            "concurrentAdmissionPolicy": {"x": 1},
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor"},
        },
    )
    assert v1beta1.convert(cq, DOWN)["spec"] == {
        "cohort": "team",
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor"},
    }


def test_an_empty_v1beta1_cohort_or_check_list_sets_nothing() -> None:
    cq = _obj("ClusterQueue", spec={"cohort": "", "admissionChecks": []})
    assert v1beta1.convert(cq, UP)["spec"] == {}


# ------------------------------------------------------------------------------ LocalQueue


def test_a_local_queues_flavor_usage_is_renamed_both_ways() -> None:
    usage = [{"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]}]
    lq = _obj(
        "LocalQueue",
        spec={"clusterQueue": "cq"},
        status={"flavorUsage": usage, "flavors": [{"name": "gpu"}], "pendingWorkloads": 1},
    )
    up = v1beta1.convert(lq, UP)
    assert up["status"] == {"flavorsUsage": usage, "pendingWorkloads": 1}
    assert up["spec"] == {"clusterQueue": "cq"}
    down = v1beta1.convert(up, DOWN)
    assert down["status"] == {"flavorUsage": usage, "pendingWorkloads": 1}


# ------------------------------------------------------------------------ the other kinds


@pytest.mark.parametrize("kind", ["ResourceFlavor", "Cohort", "Topology", "WorkloadPriorityClass"])
def test_the_kinds_alike_in_both_versions_change_only_api_version(kind: str) -> None:
    obj = _obj(kind, spec={"cohort": "kept", "anything": [1, {"b": None}]}, value=3)
    up = v1beta1.convert(obj, UP)
    assert up == {**obj, "apiVersion": UP}
    assert v1beta1.convert(up, DOWN) == obj


def test_an_admission_checks_retry_delay_is_dropped_going_up() -> None:
    ac = _obj("AdmissionCheck", spec={"controllerName": "c.io/x", "retryDelayMinutes": 15})
    assert v1beta1.convert(ac, UP)["spec"] == {"controllerName": "c.io/x"}


def test_the_same_version_is_a_copy_and_other_versions_are_refused() -> None:
    cq = _obj("ClusterQueue", spec={"cohort": "team"})
    same = v1beta1.convert(cq, DOWN)
    assert same == cq
    assert same is not cq
    with pytest.raises(v1beta1.ConversionError, match=r"only kueue\.x-k8s\.io/v1beta1 and"):
        v1beta1.convert(cq, "kueue.x-k8s.io/v1")
    with pytest.raises(v1beta1.ConversionError, match=r"^apiVersion: 'v1' is neither"):
        v1beta1.convert({**cq, "apiVersion": "v1"}, UP)


# ------------------------------------------------------------ converted objects are valid


@pytest.mark.parametrize(
    ("model", "obj"),
    [
        (
            ClusterQueue,
            {
                "spec": {
                    "cohort": "team",
                    "admissionChecks": ["prov"],
                    "flavorFungibility": {"whenCanBorrow": "Borrow"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "rf",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 4, "borrowingLimit": 2}
                                    ],
                                }
                            ],
                        }
                    ],
                }
            },
        ),
        (LocalQueue, {"spec": {"clusterQueue": "cq"}}),
    ],
)
def test_a_valid_v1beta1_object_converts_to_a_valid_v1beta2_one(
    model: type[Any], obj: dict[str, Any]
) -> None:
    meta = {"name": "x", "namespace": "ns"} if model is not ClusterQueue else {"name": "x"}
    raw = {"apiVersion": DOWN, "kind": model.KIND, "metadata": meta, **obj}
    parsed, problems = check_object(v1beta1.convert(raw, UP), model)
    assert problems == []
    assert parsed is not None


# ---------------------------------------------------------------------------- the schemas


def _schemas(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = next(s for s in crdgen.KINDS if s.kind == kind)
    hub = crdgen.openapi_schema(spec.model)
    return hub, v1beta1.schema(kind, hub)


def test_the_v1beta1_cluster_queue_schema_has_kueues_v1beta1_fields() -> None:
    hub, old = _schemas("ClusterQueue")
    spec = old["properties"]["spec"]
    assert "cohort" in spec["properties"]
    assert "cohortName" not in spec["properties"]
    assert "concurrentAdmissionPolicy" not in spec["properties"]
    assert spec["properties"]["admissionChecks"]["items"]["type"] == "string"
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert not any("cohortName" in r for r in rules)
    assert sum("has(self.cohort)" in r for r in rules) == 2
    fungibility = spec["properties"]["flavorFungibility"]["properties"]
    assert fungibility["whenCanBorrow"]["enum"] == ["MayStopSearch", "TryNextFlavor", "Borrow"]
    assert fungibility["whenCanPreempt"]["enum"] == ["MayStopSearch", "TryNextFlavor", "Preempt"]
    assert "cohortName" in hub["properties"]["spec"]["properties"]  # the hub is not changed


def test_the_kinds_alike_in_both_versions_have_the_same_schema() -> None:
    for kind in ("ResourceFlavor", "Cohort", "Topology", "WorkloadPriorityClass"):
        hub, old = _schemas(kind)
        assert old == hub


def test_the_converted_crds_are_the_kinds_converted() -> None:
    names = {s.name for s in crdgen.KINDS if s.kind in v1beta1.CONVERTED_KINDS}
    assert set(v1beta1.CONVERTED_CRDS) == names


# ------------------------------------------------------------ the webhook's ConversionReview


def _review(objects: list[dict[str, Any]], desired: str) -> bytes:
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "r-1", "desiredAPIVersion": desired, "objects": objects},
    }
    return json.dumps(body).encode()


def test_a_conversion_review_converts_every_object_in_order() -> None:
    a = _obj("ClusterQueue", spec={"cohort": "a"})
    b = _obj("ClusterQueue", spec={"cohort": "b"})
    out = convert_review(_review([a, b], UP))
    assert out["apiVersion"] == "apiextensions.k8s.io/v1"
    assert out["kind"] == "ConversionReview"
    response = out["response"]
    assert response["uid"] == "r-1"
    assert response["result"] == {"status": "Success"}
    assert [o["spec"] for o in response["convertedObjects"]] == [
        {"cohortName": "a"},
        {"cohortName": "b"},
    ]


def test_a_conversion_review_fails_whole_naming_the_object_and_field() -> None:
    good = _obj("ClusterQueue", spec={"cohort": "a"})
    bad = _obj("ClusterQueue", spec={"admissionChecks": {"prov": True}})
    response = convert_review(_review([good, bad], UP))["response"]
    assert "convertedObjects" not in response
    assert response["result"]["status"] == "Failed"
    assert response["result"]["message"] == (
        "cannot convert ClusterQueue ns/x to kueue.x-k8s.io/v1beta2: spec.admissionChecks: "
        "must be a list of names"
    )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{nope", "not JSON"),
        (json.dumps({"apiVersion": "v1", "kind": "ConversionReview"}).encode(), "expected"),
        (
            json.dumps(
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}
            ).encode(),
            "request: missing",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "ConversionReview",
                    "request": {"uid": "u", "objects": {}},
                }
            ).encode(),
            "desiredAPIVersion and a list",
        ),
    ],
)
def test_a_malformed_conversion_review_is_a_bad_request(body: bytes, names: str) -> None:
    with pytest.raises(BadReviewError, match=names):
        convert_review(body)


async def test_the_webhook_server_answers_conversion_reviews_at_convert() -> None:
    server = AdmissionServer(addr="127.0.0.1", port=0, context=None)
    client = TestClient(TestServer(server.app([])))
    await client.start_server()
    try:
        cq = _obj("ClusterQueue", api=UP, spec={"cohortName": "a"})
        resp = await client.post("/convert", data=_review([cq], DOWN))
        assert resp.status == 200
        answer = await resp.json()
        assert answer["response"]["convertedObjects"][0]["spec"] == {"cohort": "a"}
        resp = await client.post("/convert", data=b"[]")
        assert resp.status == 400
        assert "not a ConversionReview v1 request" in await resp.text()
    finally:
        await client.close()


# ------------------------------------------------------------- malformed input, limits


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "spec",
                    "status",
                    "cohort",
                    "cohortName",
                    "admissionChecks",
                    "admissionChecksStrategy",
                    "flavorFungibility",
                    "whenCanBorrow",
                    "whenCanPreempt",
                    "concurrentAdmissionPolicy",
                    "pendingWorkloadsStatus",
                    "flavorUsage",
                    "flavorsUsage",
                    "flavors",
                    "fairSharing",
                    "admissionFairSharingStatus",
                    "retryDelayMinutes",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(
    st.sampled_from(["ClusterQueue", "LocalQueue", "AdmissionCheck", "Cohort"]),
    st.sampled_from([(DOWN, UP), (UP, DOWN)]),
    st.dictionaries(st.sampled_from(["spec", "status"]), JSON, max_size=2),
)
def test_any_input_converts_or_fails_with_a_conversion_error(
    kind: str, versions: tuple[str, str], parts: dict[str, Any]
) -> None:
    have, want = versions
    obj = {"apiVersion": have, "kind": kind, "metadata": {"name": "x"}, **parts}
    out: dict[str, Any] | str
    try:
        out = v1beta1.convert(obj, want)
    except v1beta1.ConversionError as e:  # anything else fails the test
        out = str(e)
    if isinstance(out, str):
        assert out  # a message, naming what is wrong
    else:
        assert out["apiVersion"] == want
        assert out["metadata"] == {"name": "x"}


NAMES = st.text(alphabet="abc-", min_size=1, max_size=5)
FUNGIBILITY = st.sampled_from(["MayStopSearch", "TryNextFlavor"])
USAGE = st.lists(
    st.fixed_dictionaries(
        {"name": NAMES, "resources": st.lists(st.fixed_dictionaries({"name": NAMES}), max_size=2)}
    ),
    max_size=2,
)


@given(
    st.one_of(st.none(), NAMES),
    st.lists(NAMES, max_size=3),
    st.dictionaries(st.sampled_from(["whenCanBorrow", "whenCanPreempt"]), FUNGIBILITY),
    USAGE,
)
def test_queues_go_down_and_up_unchanged(
    cohort: str | None, checks: list[str], fungibility: dict[str, str], usage: list[Any]
) -> None:
    """v1beta2 → v1beta1 → v1beta2 gives back every field v1beta1 has a place for."""
    spec: dict[str, Any] = {"flavorFungibility": fungibility, "queueingStrategy": "StrictFIFO"}
    if cohort is not None:
        spec["cohortName"] = cohort
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    cq = _obj("ClusterQueue", api=UP, spec=spec, status={"flavorsUsage": usage})
    down = v1beta1.convert(cq, DOWN)
    assert ("cohort" in down["spec"]) is (cohort is not None)
    assert v1beta1.convert(down, UP) == cq
    lq = _obj("LocalQueue", api=UP, spec={"clusterQueue": "cq"}, status={"flavorsUsage": usage})
    assert v1beta1.convert(v1beta1.convert(lq, DOWN), UP) == lq


def test_a_malformed_admission_check_list_is_refused_naming_the_field() -> None:
    with pytest.raises(v1beta1.ConversionError, match=r"^spec\.admissionChecks: must be a list"):
        v1beta1.convert(_obj("ClusterQueue", spec={"admissionChecks": "prov"}), UP)


def test_a_workload_is_served_in_v1beta2_only() -> None:
    """Its CRD serves no v1beta1 (see atoll.api.v1beta1): nothing converts one."""
    with pytest.raises(v1beta1.ConversionError, match="'Workload' is served in"):
        v1beta1.convert(_obj("Workload", api=UP, spec={}), DOWN)
    spec = next(s for s in crdgen.KINDS if s.kind == "Workload")
    assert [v["name"] for v in crdgen.crd(spec)["spec"]["versions"]] == ["v1beta2"]

"""atoll's webhook server (`kube/admission.py`) and its webhooks (`kube/webhook.py`), without a
cluster: the JSON patch of a merge patch (checked by applying it with the `jsonpatch`
library), the reading of AdmissionReview bodies, the answers of the Job, pod and custom-kind
webhooks, and the server's HTTP errors (413, 400, 404) and TLS."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import jsonpatch
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from atoll.api.core import Pod
from atoll.api.labels import (
    ADMISSION_GATE,
    MANAGED_LABEL,
    POD_FINALIZER,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    ROLE_HASH_ANNOTATION,
    SUSPENDED_BY_PARENT_ANNOTATION,
)
from atoll.control import integrations, leaderworkerset, podgroups
from atoll.control import jobframework as jf
from atoll.kube import admission, webhook
from atoll.kube.admission import (
    MAX_REVIEW_BYTES,
    AdmissionServer,
    BadReviewError,
    Review,
    Webhook,
    decode_review,
    json_patch,
    respond,
)
from atoll.kube.kinds import CUSTOM_KINDS
from atoll.sandbox.processes import free_port
from tests.control.builders import controller_for
from tests.control.fakes import FakeCluster
from tests.kube.mergepatch import apply_merge_patch

# ------------------------------------------------------------------------- the JSON patch

KEYS = st.sampled_from(["a", "b", "x/y", "m~n", "", "kueue.x-k8s.io/managed"]) | st.text(max_size=3)
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=3)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, JSON_VALUES, max_size=4)


def text(value: Any) -> str:
    """JSON text, keys sorted: `True` and `1` differ, as they do for the API server."""
    return json.dumps(value, sort_keys=True)


@given(OBJECTS, OBJECTS)
def test_the_json_patch_turns_the_object_into_the_merge_patched_one(
    obj: dict[str, Any], merge: dict[str, Any]
) -> None:
    before = copy.deepcopy(obj)
    ops = json_patch(obj, merge)
    assert text(jsonpatch.apply_patch(obj, ops)) == text(apply_merge_patch(obj, merge))
    assert obj == before  # the object is read, never changed


@given(OBJECTS, OBJECTS)
def test_a_merge_patch_already_applied_gives_no_op(
    obj: dict[str, Any], merge: dict[str, Any]
) -> None:
    assert json_patch(apply_merge_patch(obj, merge), merge) == []


def test_a_missing_labels_map_is_added_whole_and_keys_are_escaped() -> None:
    patch = {"metadata": {"labels": {MANAGED_LABEL: "true"}}}
    assert json_patch({"metadata": {"name": "p"}}, patch) == [
        {"op": "add", "path": "/metadata/labels", "value": {MANAGED_LABEL: "true"}}
    ]
    assert json_patch({}, patch) == [{"op": "add", "path": "/metadata", "value": patch["metadata"]}]
    assert json_patch({"metadata": {"labels": {"app": "x"}}}, patch) == [
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"}
    ]
    assert json_patch(
        {"metadata": {"labels": {"a~b": "1"}}}, {"metadata": {"labels": {"a~b": None}}}
    ) == [{"op": "remove", "path": "/metadata/labels/a~0b"}]


def test_a_list_whose_items_change_json_type_is_replaced() -> None:
    assert json_patch({"a": [1]}, {"a": [True]}) == [
        {"op": "replace", "path": "/a", "value": [True]}
    ]
    assert json_patch({"a": [1]}, {"a": [1]}) == []


def test_a_value_of_another_json_type_is_replaced() -> None:
    assert json_patch({"spec": {"suspend": 1}}, {"spec": {"suspend": True}}) == [
        {"op": "replace", "path": "/spec/suspend", "value": True}
    ]


# ---------------------------------------------------------------------------- reviews


def review(
    obj: dict[str, Any] | None,
    *,
    old: dict[str, Any] | None = None,
    operation: str = "CREATE",
    resource: tuple[str, str, str] = ("batch", "v1", "jobs"),
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
) -> dict[str, Any]:
    group, version, plural = resource
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": "Job"},
            "resource": {"group": group, "version": version, "resource": plural},
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


def encoded(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_a_review_is_read_with_its_objects() -> None:
    job = {"metadata": {"name": "j"}}
    got = decode_review(encoded(review(job, old=job, operation="UPDATE")))
    assert got == Review(
        uid="705ab4f5-6393-11e8-b7cc-42010a800002",
        operation="UPDATE",
        resource=("batch", "v1", "jobs"),
        object=job,
        old_object=job,
    )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        pytest.param(b"{not json", "not JSON", id="not-json"),
        pytest.param(b"\xff\xfe", "not JSON", id="not-utf8"),
        pytest.param(b"[]", "not a JSON object", id="a-list"),
        pytest.param(
            encoded({**review({}), "apiVersion": "admission.k8s.io/v1beta1"}),
            "admission.k8s.io/v1beta1",
            id="v1beta1",
        ),
        pytest.param(encoded({**review({}), "request": None}), "request:", id="no-request"),
        pytest.param(encoded(review({}, uid="")), "request.uid", id="no-uid"),
        pytest.param(encoded(review({}, operation="")), "request.operation", id="no-operation"),
        pytest.param(
            encoded({**review({}), "request": {**review({})["request"], "resource": "jobs"}}),
            "request.resource",
            id="resource-not-an-object",
        ),
        pytest.param(encoded(review([1])), "request.object", id="object-a-list"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_review_names_what_is_wrong(body: bytes, names: str) -> None:
    with pytest.raises(BadReviewError, match=names.replace(".", r"\.")):
        decode_review(body)


# ------------------------------------------------------------------ the webhooks' answers


def manages(obj: Any) -> bool:
    return jf.queue_name(obj) is not None


JOBS = webhook.job_webhook(manages)
LIMIT = "kueue.x-k8s.io/max-exec-time-seconds"
PODS = webhook.pod_webhook(manages, parents=frozenset({leaderworkerset.FRAMEWORK}))
POD_RESOURCE = ("", "v1", "pods")


def a_job(*, queue: str | None = "team-a", suspend: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": 2,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.invalid/x:1"}],
            }
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    labels = {QUEUE_NAME_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": labels},
        "spec": spec,
    }


def a_pod(
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gates: list[dict[str, Any]] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if finalizers is not None:
        meta["finalizers"] = finalizers
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def an_lws(labels: dict[str, str], *, size: int) -> dict[str, Any]:
    lws = CUSTOM_KINDS["LeaderWorkerSet"]
    return {
        "apiVersion": f"{lws.group}/{lws.version}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "s", "namespace": "ns", "labels": labels},
        "spec": {"leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {}}}},
    }


def answer(hook: Webhook, body: dict[str, Any]) -> dict[str, Any]:
    out = respond(hook, decode_review(encoded(body)))
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == body["request"]["uid"]
    return dict(out["response"])


def patched(obj: dict[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the API server makes it from the response's JSON patch."""
    assert response["allowed"] is True
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return dict(jsonpatch.apply_patch(obj, ops))


@pytest.mark.parametrize("suspend", [None, False])
def test_a_managed_job_is_suspended_at_creation(suspend: bool | None) -> None:
    job = a_job(suspend=suspend)
    out = answer(JOBS, review(job))
    assert patched(job, out) == {**job, "spec": {**job["spec"], "suspend": True}}


def test_a_suspended_or_unmanaged_job_passes_unchanged() -> None:
    for job in (a_job(suspend=True), a_job(queue=None)):
        out = answer(JOBS, review(job))
        assert out == {"uid": out["uid"], "allowed": True}


def test_a_job_with_a_bad_queue_name_is_refused_with_422() -> None:
    job = a_job(queue="Not_A_Name")
    out = answer(JOBS, review(job))
    assert out["allowed"] is False
    assert "patch" not in out
    assert out["status"]["code"] == 422
    assert jf.QUEUE_NAME_FIELD in out["status"]["message"]
    assert '"Not_A_Name"' in out["status"]["message"]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("0", "must be greater than 0"),
        ("-5", "must be greater than 0"),
        ("1h", "must be a whole number of seconds"),
        ("", "must be a whole number of seconds"),
        ("9223372036854775808", "must be a whole number of seconds"),
    ],
)
def test_a_new_job_with_a_bad_max_exec_time_label_is_refused_with_422(raw: str, why: str) -> None:
    """Kueue's webhook checks `kueue.x-k8s.io/max-exec-time-seconds` on creation and when an
    update changes it; the Workload's reader (`jf.max_exec_seconds`) takes such a value as no
    limit, for a Job that bypassed the webhook."""
    job = a_job()
    job["metadata"]["labels"][LIMIT] = raw
    out = answer(JOBS, review(job))
    assert out["allowed"] is False
    assert out["status"]["code"] == 422
    assert out["status"]["message"].endswith(
        f'{jf.MAX_EXEC_TIME_FIELD}: Invalid value: "{raw}": {why}'
    )
    # a valid limit (beyond int32: no limit, as Kueue reads it) passes
    for ok in ("600", "+30", "2147483648"):
        job["metadata"]["labels"][LIMIT] = ok
        assert answer(JOBS, review(job))["allowed"] is True
    # an update that leaves the label as it was passes (a Job that bypassed the webhook
    # can still be stopped); one that changes it to a bad value is refused
    job["metadata"]["labels"][LIMIT] = raw
    out = answer(JOBS, review(job, old=copy.deepcopy(job), operation="UPDATE"))
    assert out["allowed"] is True
    old = copy.deepcopy(job)
    old["metadata"]["labels"][LIMIT] = "600"
    out = answer(JOBS, review(job, old=old, operation="UPDATE"))
    assert out["allowed"] is False
    assert f'Invalid value: "{raw}": {why}' in out["status"]["message"]


def test_a_running_jobs_max_exec_time_label_cannot_change() -> None:
    """Kueue's rule: the label changes only while the Job is suspended before and after."""
    old, new = a_job(suspend=False), a_job(suspend=False)
    old["metadata"]["labels"][LIMIT] = "600"
    new["metadata"]["labels"][LIMIT] = "1200"
    out = answer(JOBS, review(new, old=old, operation="UPDATE"))
    assert out["allowed"] is False
    assert out["status"]["message"].endswith(
        f'{jf.MAX_EXEC_TIME_FIELD}: Invalid value: "1200": field is immutable'
    )
    old, new = a_job(suspend=True), a_job(suspend=True)
    old["metadata"]["labels"][LIMIT] = "600"
    new["metadata"]["labels"][LIMIT] = "1200"
    assert answer(JOBS, review(new, old=old, operation="UPDATE"))["allowed"] is True


def test_a_running_jobs_queue_name_cannot_change_or_go() -> None:
    old = a_job(suspend=False)
    for new in (a_job(queue="team-b", suspend=False), a_job(queue=None, suspend=False)):
        out = answer(JOBS, review(new, old=old, operation="UPDATE"))
        assert out["allowed"] is False
        assert out["status"]["code"] == 422
        assert "field is immutable" in out["status"]["message"]
    # suspended, it can change (and an update does not suspend it again)
    new = a_job(queue="team-b", suspend=True)
    out = answer(JOBS, review(new, old=a_job(suspend=True), operation="UPDATE"))
    assert patched(new, out) == new


# ------------------------------------------------------- the default LocalQueue (Kueue's)


def default_in(*namespaces: str) -> jf.Defaults:
    """A default LocalQueue in these namespaces."""
    return jf.Defaults(queue=lambda namespace: namespace in namespaces)


def not_owned(obj: Any) -> bool:
    """A `manages` that, like the operator's, leaves objects a managed kind owns alone."""
    return manages(obj) and not obj.metadata.owner_references


DEFAULTING = webhook.job_webhook(not_owned, default_in("ns"))


def test_a_new_job_without_a_queue_name_gets_its_namespaces_default_localqueue() -> None:
    job = a_job(queue=None)
    got = patched(job, answer(DEFAULTING, review(job)))
    assert got["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}
    assert got["spec"]["suspend"] is True
    # created suspended, it is only labelled
    job = a_job(queue=None, suspend=True)
    got = patched(job, answer(DEFAULTING, review(job)))
    assert got == {**job, "metadata": {**job["metadata"], "labels": {QUEUE_NAME_LABEL: "default"}}}


def test_no_default_queue_is_given_without_a_default_localqueue_an_owner_or_on_update() -> None:
    elsewhere = copy.deepcopy(a_job(queue=None))
    elsewhere["metadata"]["namespace"] = "other"
    owned = _owned_by("JobSet", "jobset.x-k8s.io/v1alpha2")
    for job in (elsewhere, owned):
        out = answer(DEFAULTING, review(job))
        assert out == {"uid": out["uid"], "allowed": True}
    # an update of a Job created before the default LocalQueue leaves it unlabelled
    job = a_job(queue=None, suspend=False)
    out = answer(DEFAULTING, review(job, old=copy.deepcopy(job), operation="UPDATE"))
    assert out == {"uid": out["uid"], "allowed": True}
    # a Job that names a queue keeps it
    job = a_job(queue="team-a")
    assert patched(job, answer(DEFAULTING, review(job)))["metadata"]["labels"] == {
        QUEUE_NAME_LABEL: "team-a"
    }


def _operators_job_manages(*frameworks: str) -> Any:
    """The operator's `manages` of Jobs with these frameworks enabled (which kinds own Jobs)."""
    ints = integrations.enabled((integrations.BATCH_JOB, *frameworks), FakeCluster())
    return controller_for(ints[0], FakeCluster(), gpus=8).manages


def _owned_by(kind: str, api_version: str) -> dict[str, Any]:
    job = a_job(queue=None)
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u", "controller": True}
    ]
    return job


@pytest.mark.parametrize(
    ("owner", "frameworks", "defaulted"),
    [
        pytest.param(("CronJob", "batch/v1"), (), True, id="cronjob"),
        pytest.param(("JobSet", "jobset.x-k8s.io/v1alpha2"), ("jobset.x-k8s.io/jobset",), False,
                     id="jobset-enabled"),
        pytest.param(("JobSet", "jobset.x-k8s.io/v1alpha2"), (), True, id="jobset-disabled"),
        pytest.param(("MPIJob", "kubeflow.org/v2beta1"), ("kubeflow.org/mpijob",), False,
                     id="mpijob-enabled"),
    ],
)  # fmt: skip
def test_a_job_owned_by_a_kind_atoll_manages_is_not_defaulted(
    owner: tuple[str, str], frameworks: tuple[str, ...], defaulted: bool
) -> None:
    """Kueue's rule, with the operator's own owner check: a CronJob's Job gets the default
    LocalQueue, a JobSet's does not, unless the JobSet framework is off."""
    hook = webhook.job_webhook(_operators_job_manages(*frameworks), default_in("ns"))
    job = _owned_by(*owner)
    labels = patched(job, answer(hook, review(job)))["metadata"]["labels"]
    assert labels == ({QUEUE_NAME_LABEL: "default"} if defaulted else {})


def test_an_empty_queue_name_counts_as_none() -> None:
    """As Kueue reads the label: `queue-name: ""` gets the default, and setting it empty
    where a default LocalQueue exists is refused as a removal."""
    job = a_job(queue=None)
    job["metadata"]["labels"] = {QUEUE_NAME_LABEL: ""}
    got = patched(job, answer(DEFAULTING, review(job)))
    assert got["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}
    out = answer(DEFAULTING, review(job, old=a_job(suspend=True), operation="UPDATE"))
    assert out["allowed"] is False
    assert (
        "queue-name must not be empty in namespace with default queue" in (out["status"]["message"])
    )


def test_a_queue_name_cannot_be_removed_where_a_default_localqueue_exists() -> None:
    old, new = a_job(suspend=True), a_job(queue=None, suspend=True)
    out = answer(DEFAULTING, review(new, old=old, operation="UPDATE"))
    assert out["allowed"] is False
    assert out["status"]["message"] == (
        f'{jf.QUEUE_NAME_FIELD}: Invalid value: "": queue-name must not be empty in '
        "namespace with default queue"
    )
    # without one, a suspended Job may drop it
    assert answer(JOBS, review(new, old=old, operation="UPDATE"))["allowed"] is True


def test_a_new_object_of_a_managed_kind_gets_the_default_localqueue_but_a_plain_pod_does_not() -> (
    None
):
    js = CUSTOM_KINDS["JobSet"]
    hook = webhook.kind_webhook(not_owned, js, default_in("ns"))
    obj = {
        "apiVersion": f"{js.group}/{js.version}",
        "kind": "JobSet",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"replicatedJobs": []},
    }
    resource = (js.group, js.version, js.plural)
    got = patched(obj, answer(hook, review(obj, resource=resource)))
    assert got["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}
    assert js.suspended(js.model.from_dict(got))
    # its queue name cannot be removed afterwards, suspended or not
    update = review(obj, old=got, operation="UPDATE", resource=resource)
    assert answer(hook, update)["allowed"] is False
    # a LeaderWorkerSet's pod templates get the label too (the pod webhook gates its pods)
    lws = CUSTOM_KINDS["LeaderWorkerSet"]
    group = an_lws({}, size=2)
    lws_hook = webhook.kind_webhook(not_owned, lws, default_in("ns"))
    resource = (lws.group, lws.version, lws.plural)
    got = patched(group, answer(lws_hook, review(group, resource=resource)))
    assert got["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}
    template = got["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert template["labels"][QUEUE_NAME_LABEL] == "default"
    # plain pods: only those that name a queue are sent to atoll (`object_selector`)
    assert webhook.object_selector(webhook.POD_WEBHOOK_ID) == {
        "matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]
    }
    assert webhook.object_selector(webhook.WEBHOOK_ID) is None
    assert webhook.object_selector(js.webhook_id) is None


PRIORITY_DEFAULT = jf.Defaults(queue=default_in("ns").queue, priority_class=lambda: True)


def test_a_new_job_without_a_priority_class_gets_the_default_workloadpriorityclass() -> None:
    """Kueue's WorkloadPriorityClass defaulting (gate on, a class named `default`): the
    label is added with the queue name's default, and never over a class the Job names."""
    hook = webhook.job_webhook(not_owned, PRIORITY_DEFAULT)
    job = a_job(queue=None)
    assert patched(job, answer(hook, review(job)))["metadata"]["labels"] == {
        QUEUE_NAME_LABEL: "default",
        PRIORITY_CLASS_LABEL: "default",
    }
    named = a_job()
    named["metadata"]["labels"][PRIORITY_CLASS_LABEL] = "high"
    assert patched(named, answer(hook, review(named)))["metadata"]["labels"] == {
        QUEUE_NAME_LABEL: "team-a",
        PRIORITY_CLASS_LABEL: "high",
    }
    empty = a_job()
    empty["metadata"]["labels"][PRIORITY_CLASS_LABEL] = ""  # as Kueue reads it: none
    assert patched(empty, answer(hook, review(empty)))["metadata"]["labels"] == {
        QUEUE_NAME_LABEL: "team-a",
        PRIORITY_CLASS_LABEL: "default",
    }


def test_the_default_workloadpriorityclass_is_given_only_where_atoll_manages_the_object() -> None:
    """Not to a Job atoll leaves alone (another namespace without a default LocalQueue, one a
    managed JobSet owns), not on update, and not when the class or the gate is missing."""
    hook = webhook.job_webhook(not_owned, PRIORITY_DEFAULT)
    elsewhere = copy.deepcopy(a_job(queue=None))
    elsewhere["metadata"]["namespace"] = "other"
    for job in (elsewhere, _owned_by("JobSet", "jobset.x-k8s.io/v1alpha2")):
        out = answer(hook, review(job))
        assert out == {"uid": out["uid"], "allowed": True}
    job = a_job(suspend=True)
    out = answer(hook, review(job, old=copy.deepcopy(job), operation="UPDATE"))
    assert out == {"uid": out["uid"], "allowed": True}
    off = webhook.job_webhook(not_owned, default_in("ns"))
    assert PRIORITY_CLASS_LABEL not in patched(job, answer(off, review(job)))["metadata"]["labels"]


def test_the_default_workloadpriorityclass_reaches_pods_and_a_leaderworkersets_templates() -> None:
    pods = webhook.pod_webhook(manages, defaults=PRIORITY_DEFAULT)
    pod = a_pod(labels={QUEUE_NAME_LABEL: "team-a"})
    labels = patched(pod, answer(pods, review(pod, resource=POD_RESOURCE)))["metadata"]["labels"]
    assert labels[PRIORITY_CLASS_LABEL] == "default"
    assert labels[MANAGED_LABEL] == "true"
    lws = CUSTOM_KINDS["LeaderWorkerSet"]
    hook = webhook.kind_webhook(not_owned, lws, PRIORITY_DEFAULT)
    group = an_lws({QUEUE_NAME_LABEL: "team-a"}, size=2)
    got = patched(group, answer(hook, review(group, resource=(lws.group, lws.version, lws.plural))))
    assert got["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "default"
    template = got["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
    assert template["labels"][PRIORITY_CLASS_LABEL] == "default"


def test_a_review_of_another_resource_or_without_its_object_is_bad() -> None:
    with pytest.raises(BadReviewError, match="serves batch/v1 jobs, not /v1 pods"):
        respond(JOBS, decode_review(encoded(review(a_pod(), resource=POD_RESOURCE))))
    with pytest.raises(BadReviewError, match=r"request\.object: missing on CREATE"):
        respond(JOBS, decode_review(encoded(review(None))))
    # an operation the webhook is not for passes unchanged
    out = answer(JOBS, review(None, old=a_job(), operation="DELETE"))
    assert out == {"uid": out["uid"], "allowed": True}


def test_a_queued_pod_is_labelled_finalized_and_gated() -> None:
    pod = a_pod(labels={QUEUE_NAME_LABEL: "team-a"})
    got = patched(pod, answer(PODS, review(pod, resource=POD_RESOURCE)))
    assert got["metadata"]["labels"] == {QUEUE_NAME_LABEL: "team-a", MANAGED_LABEL: "true"}
    assert got["metadata"]["finalizers"] == [POD_FINALIZER]
    assert got["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert ROLE_HASH_ANNOTATION not in (got["metadata"].get("annotations") or {})


def test_a_pods_own_gates_and_finalizers_are_kept() -> None:
    pod = a_pod(
        labels={QUEUE_NAME_LABEL: "team-a"},
        gates=[{"name": "example.com/other"}],
        finalizers=["example.com/keep"],
    )
    got = patched(pod, answer(PODS, review(pod, resource=POD_RESOURCE)))
    assert got["spec"]["schedulingGates"] == [
        {"name": "example.com/other"},
        {"name": ADMISSION_GATE},
    ]
    assert got["metadata"]["finalizers"] == ["example.com/keep", POD_FINALIZER]


def test_a_pod_already_gated_and_finalized_is_only_labelled() -> None:
    pod = a_pod(
        labels={QUEUE_NAME_LABEL: "team-a"},
        gates=[{"name": ADMISSION_GATE}],
        finalizers=[POD_FINALIZER],
    )
    out = answer(PODS, review(pod, resource=POD_RESOURCE))
    ops = json.loads(base64.b64decode(out["patch"]))
    assert ops == [
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"}
    ]


def test_a_grouped_pod_gets_its_role_hash_or_is_refused_without_its_size() -> None:
    labels = {QUEUE_NAME_LABEL: "team-a", POD_GROUP_NAME_LABEL: "g"}
    pod = a_pod(labels=labels, annotations={POD_GROUP_TOTAL_COUNT_ANNOTATION: "2"})
    got = patched(pod, answer(PODS, review(pod, resource=POD_RESOURCE)))
    role = podgroups.shape_hash(Pod.from_dict(pod))
    assert got["metadata"]["annotations"] == {
        POD_GROUP_TOTAL_COUNT_ANNOTATION: "2",
        ROLE_HASH_ANNOTATION: role,
    }
    out = answer(PODS, review(a_pod(labels=labels), resource=POD_RESOURCE))
    assert out["allowed"] is False
    assert out["status"]["code"] == 422
    assert POD_GROUP_TOTAL_COUNT_ANNOTATION in out["status"]["message"]


def test_a_pod_of_a_suspending_parent_is_gated_even_without_labels_or_queue() -> None:
    pod = a_pod(annotations={SUSPENDED_BY_PARENT_ANNOTATION: leaderworkerset.FRAMEWORK})
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "s",
            "uid": "u",
            "controller": True,
        }
    ]
    got = patched(pod, answer(PODS, review(pod, resource=POD_RESOURCE)))
    assert got == {**pod, "spec": {**pod["spec"], "schedulingGates": [{"name": ADMISSION_GATE}]}}
    # a parent framework that is not enabled: nothing
    other = a_pod(annotations={SUSPENDED_BY_PARENT_ANNOTATION: "example.com/other"})
    out = answer(PODS, review(other, resource=POD_RESOURCE))
    assert out == {"uid": out["uid"], "allowed": True}


def test_a_pod_that_asks_for_a_topology_also_gets_the_topology_gate() -> None:
    """Kubernetes lets a gate be removed but never added: the topology gate the ungater
    removes once it has pinned the pod must be there from creation."""
    tas = {"kueue.x-k8s.io/podset-required-topology": "rack"}
    plain = a_pod(labels={QUEUE_NAME_LABEL: "team-a"}, annotations=dict(tas))
    of_lws = a_pod(annotations={**tas, SUSPENDED_BY_PARENT_ANNOTATION: leaderworkerset.FRAMEWORK})
    for pod in (plain, of_lws):
        got = patched(pod, answer(PODS, review(pod, resource=POD_RESOURCE)))
        assert got["spec"]["schedulingGates"] == [
            {"name": ADMISSION_GATE},
            {"name": jf.TOPOLOGY_GATE},
        ]


def test_an_owned_queued_pod_passes_unchanged() -> None:
    pod = a_pod(labels={QUEUE_NAME_LABEL: "team-a"})
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    ]
    out = answer(PODS, review(pod, resource=POD_RESOURCE))
    assert out == {"uid": out["uid"], "allowed": True}


def test_a_managed_custom_kind_is_suspended_where_its_kind_says() -> None:
    mpi = CUSTOM_KINDS["MPIJob"]
    hook = webhook.kind_webhook(manages, mpi)
    obj = {
        "apiVersion": f"{mpi.group}/{mpi.version}",
        "kind": "MPIJob",
        "metadata": {"name": "m", "namespace": "ns", "labels": {QUEUE_NAME_LABEL: "team-a"}},
        "spec": {"mpiReplicaSpecs": {}},
    }
    got = patched(obj, answer(hook, review(obj, resource=(mpi.group, mpi.version, mpi.plural))))
    assert got["spec"]["runPolicy"] == {"suspend": True}
    assert mpi.suspended(mpi.model.from_dict(got))
    obj["metadata"]["labels"][LIMIT] = "0"
    out = answer(hook, review(obj, resource=(mpi.group, mpi.version, mpi.plural)))
    assert out["allowed"] is False
    assert jf.MAX_EXEC_TIME_FIELD in out["status"]["message"]
    # on update it changes only while the object stays suspended (its kind's suspend field)
    resource = (mpi.group, mpi.version, mpi.plural)
    for suspend, allowed in ((False, False), (True, True)):
        before, after = copy.deepcopy(obj), copy.deepcopy(obj)
        for o, limit in ((before, "600"), (after, "1200")):
            o["metadata"]["labels"][LIMIT] = limit
            o["spec"]["runPolicy"] = {"suspend": suspend}
        update = review(after, old=before, operation="UPDATE", resource=resource)
        assert answer(hook, update)["allowed"] is allowed
    # Kueue's LeaderWorkerSet webhook does not check the label
    lws = CUSTOM_KINDS["LeaderWorkerSet"]
    group = an_lws({QUEUE_NAME_LABEL: "team-a"}, size=1)
    group["metadata"]["labels"][LIMIT] = "0"
    resource = (lws.group, lws.version, lws.plural)
    lws_hook = webhook.kind_webhook(manages, lws)
    assert answer(lws_hook, review(group, resource=resource))["allowed"]
    changed = copy.deepcopy(group)
    changed["metadata"]["labels"][LIMIT] = "-1"
    update = review(changed, old=group, operation="UPDATE", resource=resource)
    assert answer(lws_hook, update)["allowed"]


def test_a_failing_webhook_refuses_with_500() -> None:
    def broken(_obj: Mapping[str, Any], _old: Mapping[str, Any] | None) -> dict[str, Any]:
        raise KeyError("spec")

    hook = Webhook("broken", "batch", "v1", "jobs", ("CREATE",), broken)
    out = answer(hook, review(a_job()))
    assert out["allowed"] is False
    assert out["status"] == {"code": 500, "message": "webhook broken failed: KeyError('spec')"}


# -------------------------------------------------------------------------- the server

HOOKS = [JOBS, PODS]


async def _client() -> TestClient[Any, Any]:
    client = TestClient(
        TestServer(AdmissionServer(addr="127.0.0.1", port=0, context=None).app(HOOKS))
    )
    await client.start_server()
    return client


async def test_the_server_answers_a_review_at_the_webhooks_path() -> None:
    client = await _client()
    try:
        job = a_job()
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(review(job)))
        assert resp.status == 200
        assert resp.content_type == "application/json"
        out = (await resp.json())["response"]
        assert patched(job, out)["spec"]["suspend"] is True
    finally:
        await client.close()


async def test_the_server_reads_a_large_review_and_refuses_an_oversize_one_with_413() -> None:
    client = await _client()
    try:
        job = a_job()
        job["metadata"]["annotations"] = {"big": "x" * (2 * 1024 * 1024)}  # above aiohttp's 1 MiB
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(review(job)))
        assert resp.status == 200
        assert (await resp.json())["response"]["allowed"] is True
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=b" " * (MAX_REVIEW_BYTES + 1))
        assert resp.status == 413
    finally:
        await client.close()


async def test_the_server_answers_400_to_a_malformed_review_and_404_elsewhere() -> None:
    client = await _client()
    try:
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=b"{not json")
        assert resp.status == 400
        assert "not JSON" in await resp.text()
        wrong = review(a_pod(), resource=POD_RESOURCE)
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(wrong))
        assert resp.status == 400
        assert "not /v1 pods" in await resp.text()
        resp = await client.post("/mutate-nothing", data=encoded(review(a_job())))
        assert resp.status == 404
        resp = await client.get(f"/{webhook.WEBHOOK_ID}")
        assert resp.status == 405
    finally:
        await client.close()


async def test_before_the_cache_is_filled_reviews_wait_and_conversions_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server listens before the initial listing (the API server needs /convert for it):
    an admission review waits until the cache is filled, and is answered 503 after
    `READY_WAIT`; a ConversionReview is answered at once."""
    monkeypatch.setattr(admission, "READY_WAIT", 0.2)
    ready = asyncio.Event()
    server = AdmissionServer(addr="127.0.0.1", port=0, context=None)
    jobs_only = [JOBS, *webhook.passthrough([JOBS])]
    client = TestClient(TestServer(server.app(jobs_only, ready)))
    await client.start_server()
    try:
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(review(a_job())))
        assert resp.status == 503
        assert "not finished listing the cluster" in await resp.text()
        # a disabled integration's path reads nothing of the cache: answered at once
        pod = review(a_pod(), resource=POD_RESOURCE, uid="u-1")
        resp = await client.post(f"/{webhook.POD_WEBHOOK_ID}", data=encoded(pod))
        assert resp.status == 200
        assert (await resp.json())["response"] == {"uid": "u-1", "allowed": True}
        conversion = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": "kueue.x-k8s.io/v1beta1", "objects": []},
        }
        resp = await client.post("/convert", data=json.dumps(conversion).encode())
        assert resp.status == 200
        assert (await resp.json())["response"]["result"]["status"] == "Success"

        monkeypatch.setattr(admission, "READY_WAIT", 30.0)
        waiting = asyncio.ensure_future(
            client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(review(a_job())))
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()
        ready.set()
        resp = await asyncio.wait_for(waiting, 10)
        assert resp.status == 200
        assert (await resp.json())["response"]["allowed"] is True
    finally:
        await client.close()


async def test_a_disabled_integrations_path_lets_everything_through_unchanged() -> None:
    # Only Jobs are enabled; deploy/webhook.yaml still sends pods and TrainJobs here.
    jobs_only = [JOBS, *webhook.passthrough([JOBS])]
    assert {h.id for h in jobs_only} == set(webhook.RULES)
    client = TestClient(
        TestServer(AdmissionServer(addr="127.0.0.1", port=0, context=None).app(jobs_only))
    )
    await client.start_server()
    try:
        pod = review(a_pod(), resource=POD_RESOURCE, uid="u-1")
        resp = await client.post(f"/{webhook.POD_WEBHOOK_ID}", data=encoded(pod))
        assert resp.status == 200
        assert (await resp.json())["response"] == {"uid": "u-1", "allowed": True}
        resp = await client.post(f"/{webhook.WEBHOOK_ID}", data=encoded(review(a_job())))
        assert "patch" in (await resp.json())["response"]  # the enabled one still suspends
    finally:
        await client.close()


async def test_the_url_server_serves_https_with_its_ca() -> None:
    url_server = webhook.make_url_server(addr="127.0.0.1", port=free_port(), host="127.0.0.1")
    task = asyncio.create_task(url_server.server.serve(HOOKS))
    try:
        assert not url_server.server.listening.is_set()
        async with asyncio.timeout(60):
            await url_server.server.listening.wait()
        assert await webhook.listening(url_server.url)
        trusted = ssl.create_default_context(cadata=url_server.ca.decode())
        job = a_job()
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{url_server.url}/{webhook.WEBHOOK_ID}", data=encoded(review(job)), ssl=trusted
            ) as resp:
                assert resp.status == 200
                assert patched(job, (await resp.json())["response"])["spec"]["suspend"] is True
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.post(f"{url_server.url}/{webhook.WEBHOOK_ID}", data=b"{}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not url_server.server.listening.is_set()
    assert not await webhook.listening(url_server.url)

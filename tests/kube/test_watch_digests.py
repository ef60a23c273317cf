"""The Job, pod and node watches drop an event only when the model it would parse is the one
already held (`handlers.Digests`): the views cover every field the models read, an event that
changes only what they ignore parses to an equal model, and one that changes a read field is
handled. A pod a re-list finds gone is handled with its last state."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.core import Job, JobStatus, Node, NodeStatus, Pod, PodCondition, PodStatus
from atoll.api.labels import MANAGED_LABEL, WORKLOAD_ANNOTATION
from atoll.api.meta import KubeObject
from atoll.control.workqueue import WorkQueue
from atoll.kube import handlers
from atoll.kube.watch import Watches
from atoll.state.cache import Cache
from tests.kube.wiring import bare_wiring

CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "r",
    "message": "m",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
    "lastProbeTime": None,
}
META = {
    "namespace": "ns",
    "name": "a",
    "uid": "u",
    "resourceVersion": "1",
    "labels": {"l": "1"},
    "managedFields": [{"manager": "x"}],
}
CONTAINER = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
POD = {
    "metadata": META,
    "spec": {"containers": [CONTAINER], "nodeName": "n1"},
    "status": {
        "phase": "Running",
        "conditions": [CONDITION],
        "podIP": "10.0.0.1",
        "containerStatuses": [{"name": "c", "ready": True}],
    },
}
JOB = {
    "metadata": META,
    "spec": {"parallelism": 2, "template": {"spec": {"containers": [CONTAINER]}}},
    "status": {"active": 2, "ready": 1, "conditions": [CONDITION], "terminating": 0},
}
NODE = {
    "metadata": {**META, "namespace": None},
    "spec": {"unschedulable": False},
    "status": {
        "capacity": {"cpu": "8"},
        "allocatable": {"cpu": "8"},
        "conditions": [{**CONDITION, "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
        "images": [{"names": ["x"]}],
        "nodeInfo": {"kubeletVersion": "v1"},
    },
}

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    def edit(body: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        at: Any = body
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at.setdefault(p, {})
        at[leaf] = value

    return edit


IGNORED: dict[str, list[Edit]] = {
    "pod": [
        _set("metadata.resourceVersion", "2"),
        _set("metadata.managedFields", [{"manager": "y"}]),
        _set("status.podIP", "10.0.0.2"),
        _set("status.containerStatuses", [{"name": "c", "ready": False}]),
        _set("status.conditions.0.lastTransitionTime", "2026-01-02T00:00:00Z"),
        _set("status.startTime", "2026-01-02T00:00:00Z"),
    ],
    "job": [
        _set("metadata.resourceVersion", "2"),
        _set("status.terminating", 1),
        _set("status.conditions.0.lastTransitionTime", "2026-01-02T00:00:00Z"),
        _set("status.observedGeneration", 3),
    ],
    "node": [
        _set("metadata.resourceVersion", "2"),
        _set("status.conditions.0.lastHeartbeatTime", "2026-01-02T00:00:00Z"),
        _set("status.images", []),
        _set("status.nodeInfo", {"kubeletVersion": "v2"}),
    ],
}
READ: dict[str, list[Edit]] = {
    "pod": [
        _set("metadata.labels", {"l": "2"}),
        _set("spec.nodeName", "n2"),
        _set("spec.schedulingGates", [{"name": "g"}]),
        _set("status.phase", "Succeeded"),
        _set("status.conditions.0.status", "False"),
        _set("metadata.deletionTimestamp", "2026-01-02T00:00:00Z"),
    ],
    "job": [
        _set("spec.suspend", True),
        _set("status.ready", 2),
        _set("status.succeeded", 1),
        _set("status.conditions.0.reason", "other"),
        _set("metadata.annotations", {"a": "b"}),
    ],
    "node": [
        _set("metadata.labels", {"l": "2"}),
        _set("spec.unschedulable", True),
        _set("status.allocatable", {"cpu": "4"}),
        _set("status.conditions.0.status", "False"),
    ],
}
KINDS: dict[str, tuple[Mapping[str, Any], type[KubeObject], Callable[[Any], object]]] = {
    "pod": (POD, Pod, lambda body: handlers.pod_digest(body)[0]),
    "job": (JOB, Job, handlers.job_digest),
    "node": (NODE, Node, handlers.node_digest),
}


def _fields(model: type[Any]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_the_views_read_every_status_field_the_models_keep() -> None:
    assert _fields(PodStatus) == {*handlers.POD_STATUS_FIELDS, "conditions"}
    assert _fields(JobStatus) == {*handlers.JOB_STATUS_FIELDS, "conditions"}
    assert _fields(NodeStatus) == {*handlers.NODE_STATUS_FIELDS, "conditions"}
    assert _fields(PodCondition) == {"type", "status", "reason", "message"}


def _without_version(obj: KubeObject) -> KubeObject:
    return obj.model_copy(
        update={"metadata": obj.metadata.model_copy(update={"resource_version": None})}
    )


def _edited(kind: str, edits: list[Edit]) -> tuple[KubeObject, KubeObject, bool]:
    """The model of the kind's base object and of the object edited, and whether the digests,
    having seen the base object, find the edited one changed."""
    base, model, digest = KINDS[kind]
    new = copy.deepcopy(dict(base))
    for edit in edits:
        edit(new)
    digests: handlers.Digests[object] = handlers.Digests()
    assert digests.changed("k", digest(base))  # never seen
    digests.seen("k", digest(base))
    return model.from_dict(base), model.from_dict(new), digests.changed("k", digest(new))


@given(st.sampled_from(sorted(KINDS)), st.data())
def test_an_event_changing_only_ignored_fields_is_dropped_and_would_parse_the_same(
    kind: str, data: st.DataObject
) -> None:
    edits = data.draw(st.lists(st.sampled_from(IGNORED[kind]), min_size=1, unique=True))
    before, after, changed = _edited(kind, edits)
    assert not changed
    assert _without_version(after) == _without_version(before)


@given(st.sampled_from(sorted(KINDS)), st.data())
def test_an_event_changing_a_read_field_is_handled(kind: str, data: st.DataObject) -> None:
    edits = data.draw(st.lists(st.sampled_from(READ[kind]), min_size=1, unique=True))
    before, after, changed = _edited(kind, edits)
    assert changed
    assert after != before


def _pod_watch() -> tuple[Callable[[str | None, Mapping[str, Any]], None], list[Any]]:
    cache = Cache()
    seen: list[tuple[Pod, bool]] = []
    wiring = bare_wiring(cache, group_pod=lambda pod, deleted: seen.append((pod, deleted)))
    watches = Watches()
    handlers.register_watches(watches, wiring)
    pods = next(w for r, w in watches.watches.items() if r.plural == "pods")
    return pods.handler, seen


def test_a_pod_a_relist_finds_gone_is_handled_with_its_last_state() -> None:
    on, seen = _pod_watch()
    managed = copy.deepcopy(POD)
    managed["metadata"]["labels"] = {MANAGED_LABEL: "true"}
    on("ADDED", managed)
    again = copy.deepcopy(managed)
    again["metadata"]["resourceVersion"] = "5"
    on("MODIFIED", again)  # nothing read changed: not handled again
    on("DELETED", {"metadata": {"namespace": "ns", "name": "a"}})  # what a re-list reports
    assert [(p.metadata.labels, deleted) for p, deleted in seen] == [
        ({MANAGED_LABEL: "true"}, False),
        ({MANAGED_LABEL: "true"}, True),
    ]


def _kept_pod() -> dict[str, Any]:
    """POD as a Workload's pod (its last state is kept, so later events reuse its parts)."""
    pod = copy.deepcopy(POD)
    pod["metadata"]["annotations"] = {WORKLOAD_ANNOTATION: "wl"}
    return pod


def _pod_watch_waking() -> tuple[
    Callable[[str | None, Mapping[str, Any]], None], list[Pod], list[int]
]:
    cache = Cache()
    seen: list[Pod] = []
    wakes: list[int] = []
    wiring = bare_wiring(
        cache, group_pod=lambda pod, _deleted: seen.append(pod), wake=lambda: wakes.append(1)
    )
    watches = Watches()
    handlers.register_watches(watches, wiring)
    pods = next(w for r, w in watches.watches.items() if r.plural == "pods")
    return pods.handler, seen, wakes


SPEC_EDITS: list[Edit] = [
    _set("spec.nodeName", "n2"),
    _set("spec.schedulingGates", [{"name": "g"}]),
    _set("spec.containers", [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]),
]


@given(st.lists(st.lists(st.sampled_from(READ["pod"] + IGNORED["pod"] + SPEC_EDITS), max_size=4)))
def test_a_kept_pod_parsed_from_its_last_state_is_the_pod_parsed_whole(
    steps: list[list[Edit]],
) -> None:
    """A kept pod's events parse only the changed metadata or status when the spec is the
    same: the pod held is then, after every event, the one a whole parse of it gives (but
    what the digests ignore when nothing read changed), and its resourceVersion is the
    event's."""
    on, seen, _ = _pod_watch_waking()
    body = _kept_pod()
    on("ADDED", body)
    for i, edits in enumerate(steps):
        body = copy.deepcopy(body)
        for edit in edits:
            edit(body)
        body["metadata"]["resourceVersion"] = str(i + 2)
        handled = len(seen)
        on("MODIFIED", body)
        whole = Pod.from_dict(body)
        if len(seen) > handled:
            assert seen[-1] == whole
            assert seen[-1].metadata.resource_version == str(i + 2)
        else:  # dropped: nothing read changed
            assert _without_version(seen[-1]) == _without_version(whole)


@given(st.sampled_from(READ["pod"] + SPEC_EDITS))
def test_a_kept_pod_event_changing_a_read_field_is_handled(edit: Edit) -> None:
    on, seen, _ = _pod_watch_waking()
    body = _kept_pod()
    on("ADDED", body)
    on("MODIFIED", copy.deepcopy(body))  # nothing read changed: dropped
    assert len(seen) == 1
    new = copy.deepcopy(body)
    edit(new)
    on("MODIFIED", new)
    assert len(seen) == 2
    assert seen[-1] == Pod.from_dict(new)
    assert seen[-1] != seen[0]


def test_a_pod_wakes_the_scheduler_once_when_it_ends() -> None:
    """Its end frees its node's room (one wake); the events after it (the Job controller's
    finalizer removal, the deletion) change no capacity and wake nothing."""
    on, seen, wakes = _pod_watch_waking()
    body = _kept_pod()
    on("ADDED", body)
    assert wakes == []
    done = copy.deepcopy(body)
    done["status"]["phase"] = "Succeeded"
    on("MODIFIED", done)
    assert len(wakes) == 1
    unfinalized = copy.deepcopy(done)
    unfinalized["metadata"]["finalizers"] = []
    on("MODIFIED", unfinalized)
    on("DELETED", unfinalized)
    assert len(seen) == 4  # every event handled
    assert len(wakes) == 1


def test_a_pod_whose_end_was_not_kept_wakes_on_every_ending_event() -> None:
    """A pod of no Workload is not kept: whether it ended before is not known, so each of
    its ending events and its deletion wake the scheduler, as a deleted running pod does."""
    on, _, wakes = _pod_watch_waking()
    done = copy.deepcopy(POD)
    done["status"]["phase"] = "Failed"
    on("ADDED", done)
    again = copy.deepcopy(done)
    again["metadata"]["labels"] = {"l": "2"}
    on("MODIFIED", again)
    on("DELETED", again)
    assert len(wakes) == 3
    running = copy.deepcopy(_kept_pod())
    running["metadata"]["name"] = "b"
    on("ADDED", running)
    on("DELETED", running)
    assert len(wakes) == 4


@given(st.lists(st.sampled_from(READ["pod"] + IGNORED["pod"]), max_size=3))
def test_pods_of_equal_statuses_share_one_and_each_is_its_whole_parse(edits: list[Edit]) -> None:
    """A status parsed for one pod is held once for every pod whose status reads the same
    (`pod_digest`'s status part); a pod whose status reads otherwise gets its own."""
    on, seen, _ = _pod_watch_waking()
    first = _kept_pod()
    on("ADDED", first)
    other = _kept_pod()
    other["metadata"]["name"] = "b"
    on("ADDED", other)
    edited = copy.deepcopy(other)
    for edit in edits:
        edit(edited)
    edited["metadata"]["resourceVersion"] = "9"
    on("MODIFIED", edited)
    a, b = seen[0], seen[-1]
    assert _without_version(b) == _without_version(Pod.from_dict(edited))
    assert seen[1].status is a.status
    if b.status == a.status:
        assert b.status is a.status


async def test_a_jobs_pod_seen_succeeded_reconciles_the_job_once() -> None:
    """Its pods seen Succeeded are counted ahead of the Job's status (reclaimable pods): the
    Job is reconciled a moment after the first such event (the pods of a gang that end
    together make one reconcile), not on later ones, nor for a pod of a Job the cache does
    not hold with that UID."""
    cache = Cache()
    jobs = WorkQueue("jobs")
    wiring = bare_wiring(cache, jobs=jobs)
    watches = Watches()
    handlers.register_watches(watches, wiring)
    on = next(w for r, w in watches.watches.items() if r.plural == "pods").handler
    cache.set_job(Job.from_dict({**JOB, "metadata": {**META, "name": "train", "uid": "j1"}}))
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1"}
    body = copy.deepcopy(POD)
    body["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    on("ADDED", body)
    assert jobs._queued == set()
    done = copy.deepcopy(body)
    done["status"]["phase"] = "Succeeded"
    on("MODIFIED", done)
    assert jobs._queued == set()
    assert set(jobs._timers) == {"ns/train"}
    assert cache.succeeded_pods == {"j1": frozenset({("a", None)})}
    jobs._timers.pop("ns/train").cancel()
    later = copy.deepcopy(done)
    later["metadata"]["finalizers"] = []
    on("MODIFIED", later)
    assert jobs._timers == {}
    stranger = copy.deepcopy(done)
    stranger["metadata"]["name"] = "b"
    stranger["metadata"]["ownerReferences"] = [{**owner, "uid": "old", "controller": True}]
    on("ADDED", stranger)  # a pod of an earlier Job of that name
    assert jobs._timers == {}
    assert set(cache.succeeded_pods) == {"j1"}

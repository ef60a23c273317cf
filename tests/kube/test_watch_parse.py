"""The Workload watch's shortcuts (a status-only change reuses the known spec; a pod-set
template equal to one parsed before is that one) give the same Workload as a full parse, and
the status merge patch the writer sends turns the old status into the new one."""

from __future__ import annotations

import copy
import json
from typing import Any

import structlog
from hypothesis import given
from hypothesis import strategies as st

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.core import Job, PodSpec, PodTemplateSpec
from atoll.api.meta import Condition
from atoll.api.workload import Workload
from atoll.kube.handlers import Shared, _parse_sharing, _parse_workload, warned, warned_check
from atoll.kube.writers import merge_patch, with_deletions
from atoll.state.afs import Settings, Tracker
from atoll.state.cache import Cache
from tests.api.builders import pod_set, pod_template, workload
from tests.kube.mergepatch import apply_merge_patch


def _templates() -> Shared[PodTemplateSpec]:
    return Shared(16)


def _raw(generation: int = 1, uid: str = "u1", status: dict[str, Any] | None = None) -> Any:
    raw = workload(pod_sets=[pod_set(count=2)], queueName="q")
    raw["metadata"] |= {"uid": uid, "generation": generation, "resourceVersion": "7"}
    if status is not None:
        raw["status"] = status
    return raw


ADMITTED = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "admission": {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "count": 2}],
    },
}


def test_a_status_change_at_the_same_generation_shares_the_spec_and_parses_the_rest() -> None:
    known = Workload.from_dict(_raw())
    new = _raw(status=ADMITTED)
    new["metadata"]["resourceVersion"] = "9"
    fast = _parse_workload(new, known, _templates())
    assert fast is not None
    assert fast == Workload.from_dict(new)
    assert fast.spec is known.spec
    assert fast.metadata.resource_version == "9"


def test_a_new_generation_or_another_object_is_parsed_whole() -> None:
    known = Workload.from_dict(_raw())
    for other in (_raw(generation=2), _raw(uid="u2")):
        other["spec"]["queueName"] = "elsewhere"
        parsed = _parse_workload(other, known, _templates())
        assert parsed is not None
        assert parsed.spec.queue_name == "elsewhere"
        assert parsed.spec is not known.spec


def _fresh(raw: Any) -> Any:
    """`raw` as decoded from its own JSON text (every string a new object, as on the wire)."""
    return json.loads(json.dumps(raw))


def test_the_type_head_and_the_priority_class_are_one_string_for_all_workloads() -> None:
    raws = [_raw(uid=uid) for uid in ("a", "b")]
    for raw in raws:
        raw["spec"]["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": "high",
        }
    a, b = (Workload.from_dict(_fresh(raw)) for raw in raws)
    assert a.api_version is b.api_version
    assert a.kind is b.kind
    assert a.spec.priority_class_ref is not None
    assert b.spec.priority_class_ref is not None
    assert a.spec.priority_class_ref.name is b.spec.priority_class_ref.name
    # a status change keeps the known Workload's; another apiVersion is parsed whole
    fast = _parse_workload(_fresh(_raw(uid="a", status=ADMITTED)), a, _templates())
    assert fast is not None
    assert fast.kind is a.kind
    assert fast.api_version is a.api_version
    other = _raw(uid="a") | {"apiVersion": "kueue.x-k8s.io/v1beta1"}
    whole = _parse_workload(other, a, _templates())
    assert whole is not None
    assert whole.api_version == "kueue.x-k8s.io/v1beta1"
    assert whole.spec is not a.spec


def test_equal_conditions_are_parsed_once_and_shared_by_every_workload() -> None:
    templates, conditions = _templates(), Shared[Condition](16)
    later = copy.deepcopy(ADMITTED)
    later["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:01Z"
    # whole parses (new objects) and a status change of a known one
    a = _parse_workload(_fresh(_raw(uid="a", status=ADMITTED)), None, templates, conditions)
    b = _parse_workload(_fresh(_raw(uid="b", status=ADMITTED)), None, templates, conditions)
    known = Workload.from_dict(_raw(uid="c"))
    c = _parse_workload(_fresh(_raw(uid="c", status=ADMITTED)), known, templates, conditions)
    d = _parse_workload(_fresh(_raw(uid="d", status=later)), None, templates, conditions)
    assert a is not None
    assert b is not None
    assert c is not None
    assert d is not None
    assert a.status is not None
    assert b.status is not None
    assert c.status is not None
    assert d.status is not None
    assert a.status.conditions is not None
    assert b.status.conditions is not None
    assert c.status.conditions is not None
    assert d.status.conditions is not None
    assert b.status.conditions[0] is a.status.conditions[0]
    assert c.status.conditions[0] is a.status.conditions[0]
    assert d.status.conditions[0] is not a.status.conditions[0]  # another time
    assert len(conditions) == 2
    for parsed, raw in ((b, _raw(uid="b", status=ADMITTED)), (d, _raw(uid="d", status=later))):
        assert parsed == Workload.from_dict(raw)  # as a full parse
    bad = _raw(uid="e", status={"conditions": [ADMITTED["conditions"][0], {"type": "X"}]})
    assert _parse_workload(bad, None, templates, conditions) is None  # refused with the rest


def test_an_invalid_status_is_refused_as_by_a_full_parse() -> None:
    known = Workload.from_dict(_raw())
    bad = _raw(status={"conditions": [{"type": "Admitted"}]})
    assert _parse_workload(bad, known, _templates()) is None


def test_equal_pod_set_templates_are_parsed_once_and_shared() -> None:
    templates = _templates()
    gpu = pod_template(cpu="8")
    first = _raw()
    first["spec"]["podSets"].append(pod_set("workers", count=4, template=gpu))
    second = copy.deepcopy(first)
    second["metadata"] |= {"name": "other", "uid": "u2"}
    second["spec"]["podSets"][1]["count"] = 3
    a = _parse_workload(first, None, templates)
    b = _parse_workload(second, None, templates)
    assert a is not None
    assert b is not None
    assert len(templates) == 2  # the two distinct templates
    assert a == Workload.from_dict(first)
    assert b == Workload.from_dict(second)
    for x, y in zip(a.spec.pod_sets, b.spec.pod_sets, strict=True):
        assert x.template is y.template
    changed = copy.deepcopy(second)
    changed["metadata"]["uid"] = "u3"
    changed["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] = "other"
    c = _parse_workload(changed, None, templates)
    assert c is not None
    assert c == Workload.from_dict(changed)
    assert c.spec.pod_sets[0].template is not a.spec.pod_sets[0].template
    assert c.spec.pod_sets[1].template is a.spec.pod_sets[1].template


def test_a_template_shared_by_a_workload_is_refused_with_it() -> None:
    templates = _templates()
    good = _raw()
    assert _parse_workload(good, None, templates) is not None
    bad = copy.deepcopy(good)
    bad["metadata"]["uid"] = "u2"
    bad["spec"]["podSets"][0]["count"] = -1  # the template is known, the pod set is not valid
    assert _parse_workload(bad, None, templates) is None


def test_the_shared_parts_keep_the_last_used() -> None:
    parts: Shared[str] = Shared(2)
    for text in (b"a", b"b"):
        part, key = parts.find(text)
        assert part is None
        parts.put(key, text.decode().upper())
    assert parts.find(b"a")[0] == "A"  # now the last used
    parts.put(parts.find(b"c")[1], "C")
    assert [parts.find(text)[0] for text in (b"a", b"b", b"c")] == ["A", None, "C"]


json_values = st.recursive(
    st.integers() | st.text(max_size=3) | st.booleans(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.sampled_from("abcde"), json_values, max_size=4)


@given(documents, documents)
def test_the_merge_patch_turns_the_old_status_into_the_new(old: Any, new: Any) -> None:
    assert apply_merge_patch(old, merge_patch(old, new)) == new


@given(documents, documents, documents)
def test_a_patch_with_deletions_sets_the_new_whole_and_removes_what_it_dropped(
    old: Any, new: Any, server: Any
) -> None:
    """The LocalQueue status writer's patch: from the status it replaces, or from a server
    copy that lacks or adds keys (a parsed status holds defaults the server never stored),
    the server ends up with every key of `new`, and none that `new` dropped from `old`."""
    assert apply_merge_patch(old, with_deletions(old, new)) == new
    result = apply_merge_patch(server, with_deletions(old, new))
    for k, v in new.items():
        if not isinstance(v, dict):
            assert result[k] == v
    assert all(k not in result for k in old if k not in new)


def test_the_merge_patch_carries_only_what_changed() -> None:
    old = {"conditions": [1], "admission": {"clusterQueue": "a", "x": 1}, "gone": 2}
    new = {"conditions": [1], "admission": {"clusterQueue": "b", "x": 1}}
    assert merge_patch(old, new) == {"admission": {"clusterQueue": "b"}, "gone": None}


def _job(name: str, image: str = "registry.invalid/a:1", parallelism: int = 2) -> Any:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "d", "uid": f"uid-{name}"},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "metadata": {"labels": {"job-name": name}},
                "spec": pod_template()["spec"] | {"containers": [{"name": "c", "image": image}]},
            },
        },
    }


def test_jobs_of_one_manifest_share_their_pod_spec_and_parse_as_a_full_parse() -> None:
    specs: Shared[PodSpec] = Shared(16)
    path = ("spec", "template", "spec")

    def parse(raw: Any) -> Job | None:
        return _parse_sharing(Job, raw, path, specs, lambda job: job.spec.template.spec)

    raws = [_job("a"), _job("b", parallelism=3), _job("c", image="registry.invalid/b:1")]
    a, b, c = (parse(raw) for raw in raws)
    assert a is not None
    assert b is not None
    assert c is not None
    assert [a, b, c] == [Job.from_dict(raw) for raw in raws]
    assert b.spec.template.spec is a.spec.template.spec
    assert c.spec.template.spec is not a.spec.template.spec
    assert (b.spec.template.metadata and b.spec.template.metadata.labels) == {"job-name": "b"}
    assert len(specs) == 2
    no_template = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {}}
    assert parse(no_template) == Job.from_dict(no_template)


def test_a_clusterqueue_asking_for_admission_fair_sharing_is_warned_about_once() -> None:
    """Without the Configuration's `admissionFairSharing`, an admission scope has no effect:
    the operator says so when such a ClusterQueue is first seen (listed or watched), not on
    every later event; with it, nothing is said."""
    configured = Cache(afs=Tracker(Settings()))
    with structlog.testing.capture_logs() as quiet:
        warned(configured)(
            ClusterQueue.from_dict(
                {
                    "metadata": {"name": "fair"},
                    "spec": {
                        "namespaceSelector": {},
                        "resourceGroups": [],
                        "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                    },
                }
            )
        )
    assert quiet == []
    cache = Cache()
    store = warned(cache)
    spec = {"namespaceSelector": {}, "resourceGroups": []}
    afs = {**spec, "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
    with structlog.testing.capture_logs() as logs:
        store(ClusterQueue.from_dict({"metadata": {"name": "plain"}, "spec": spec}))
        store(ClusterQueue.from_dict({"metadata": {"name": "fair"}, "spec": afs}))
        store(ClusterQueue.from_dict({"metadata": {"name": "fair"}, "spec": afs}))
    assert [(e["event"], e["cluster_queue"]) for e in logs] == [
        ("clusterqueue feature not run", "fair")
    ]
    assert "the Configuration has no admissionFairSharing" in logs[0]["reason"]
    assert set(cache.cluster_queues) == {"plain", "fair"}


def test_an_admission_check_waiting_for_one_of_kueues_own_controllers_is_warned_about() -> None:
    """Kueue's ProvisioningRequest and MultiKueue controllers run inside Kueue's manager: an
    AdmissionCheck naming one, not Active, will hold its ClusterQueues until some controller
    sets it Active; the operator says so once."""
    cache = Cache()
    store = warned_check(cache)

    def check(name: str, controller: str) -> AdmissionCheck:
        return AdmissionCheck.from_dict(
            {"metadata": {"name": name}, "spec": {"controllerName": controller}}
        )

    with structlog.testing.capture_logs() as logs:
        store(check("prov", "kueue.x-k8s.io/provisioning-request"))
        store(check("prov", "kueue.x-k8s.io/provisioning-request"))
        store(check("mine", "example.com/capacity"))
    assert [(e["event"], e["admission_check"]) for e in logs] == [
        ("admission check not run", "prov")
    ]
    assert "Kueue's ProvisioningRequest controller, which atoll does not run" in logs[0]["reason"]
    assert set(cache.admission_checks) == {"prov", "mine"}

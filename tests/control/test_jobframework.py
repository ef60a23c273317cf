"""The Job integration: Workload names, pod counts, priorities and start plans as Kueue's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atoll.api.core import Job, Pod, PriorityClass
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resourceflavor import ResourceFlavor
from atoll.control import jobframework as jf


def job(**spec: Any) -> Job:
    meta = spec.pop("metadata", {})
    return Job.from_dict(
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1", **meta},
            "spec": {
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                **spec,
            },
        }
    )


def test_workload_name_matches_kueues_test_vector() -> None:
    assert jf.workload_name("name", "uid") == "job-name-ef3a1"


def test_long_job_names_are_truncated_to_fit_253() -> None:
    name = jf.workload_name("a" * 300, "uid")
    assert len(name) == 253
    assert name.startswith("job-aaa")


@pytest.mark.parametrize(
    ("parallelism", "completions", "count"),
    [
        pytest.param(None, None, 1, id="defaults"),
        pytest.param(4, None, 4, id="parallelism-only"),
        pytest.param(4, 2, 2, id="fewer-completions"),
        pytest.param(2, 10, 2, id="more-completions"),
    ],
)
def test_pod_count_is_min_of_parallelism_and_completions(
    parallelism: int | None, completions: int | None, count: int
) -> None:
    spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions)) if v}
    assert jf.pod_count(job(**spec)) == count


def test_workload_has_owner_finalizer_queue_and_clean_template() -> None:
    j = job(
        metadata={"labels": {"kueue.x-k8s.io/queue-name": "team"}},
        parallelism=3,
        template={
            "metadata": {"labels": {"job-name": "train", "app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    wl = jf.build_workload(j, jf.Priority(0, None))
    assert wl.name == jf.workload_name("train", "uid-1")
    (owner,) = wl.metadata.owner_references or ()
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Job", "train", "uid-1", True)
    assert wl.metadata.finalizers == ("kueue.x-k8s.io/resource-in-use",)
    assert wl.spec.queue_name == "team"
    (ps,) = wl.spec.pod_sets
    assert ps.count == 3
    assert ps.template.metadata is not None
    assert ps.template.metadata.labels == {"app": "x"}


def test_priority_comes_from_workload_priority_class_label_first() -> None:
    j = job(metadata={"labels": {"kueue.x-k8s.io/priority-class": "high"}})
    wpcs = {"high": WorkloadPriorityClass.from_dict({"metadata": {"name": "high"}, "value": 900})}
    p = jf.resolve_priority(j, wpcs, {})
    assert p.value == 900
    assert p.ref is not None
    assert p.ref.kind == "WorkloadPriorityClass"


def test_missing_workload_priority_class_is_a_compose_error_naming_it() -> None:
    j = job(metadata={"labels": {"kueue.x-k8s.io/priority-class": "nope"}})
    with pytest.raises(jf.ComposeError, match="nope") as err:
        jf.resolve_priority(j, {}, {})
    assert err.value.reason == "WorkloadPriorityClassNotFound"


def test_global_default_priority_class_with_the_lowest_value_applies() -> None:
    pcs = {
        n: PriorityClass.from_dict({"metadata": {"name": n}, "value": v, "globalDefault": True})
        for n, v in (("a", 50), ("b", 10))
    }
    assert jf.resolve_priority(job(), {}, pcs).value == 10


def test_min_parallelism_annotation_sets_min_count_and_is_validated() -> None:
    ann = {"kueue.x-k8s.io/job-min-parallelism": "2"}
    wl = jf.build_workload(job(metadata={"annotations": ann}, parallelism=4), jf.Priority(0, None))
    assert wl.spec.pod_sets[0].min_count == 2
    bad = {"kueue.x-k8s.io/job-min-parallelism": "4"}
    with pytest.raises(jf.ComposeError, match="must be > 0 and < "):
        jf.build_workload(job(metadata={"annotations": bad}, parallelism=4), jf.Priority(0, None))


def _flavor(**spec: Any) -> ResourceFlavor:
    return ResourceFlavor.from_dict({"metadata": {"name": "f"}, "spec": spec})


def test_start_plan_injects_flavor_labels_tolerations_and_kueue_keys() -> None:
    flavor = _flavor(
        nodeLabels={"pool": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    plan = jf.start_plan(
        job(parallelism=2),
        workload="wl",
        cluster_queue="cq",
        local_queue="lq",
        flavors=[flavor],
        admitted_count=2,
    )
    assert plan.node_selector == {"pool": "gpu"}
    assert [t.key for t in plan.tolerations] == ["gpu"]
    assert plan.labels["kueue.x-k8s.io/podset"] == "main"
    assert plan.labels["kueue.x-k8s.io/cluster-queue-name"] == "cq"
    assert plan.annotations == {"kueue.x-k8s.io/workload": "wl"}
    assert plan.parallelism is None


def test_start_plan_refuses_to_overwrite_a_conflicting_node_selector() -> None:
    j = job(template={"spec": {"nodeSelector": {"pool": "cpu"}, "containers": []}})
    with pytest.raises(jf.StartConflictError, match="'pool'"):
        jf.start_plan(
            j,
            workload="wl",
            cluster_queue="cq",
            local_queue="lq",
            flavors=[_flavor(nodeLabels={"pool": "gpu"})],
            admitted_count=1,
        )


def test_partial_admission_sets_parallelism_to_the_admitted_count() -> None:
    plan = jf.start_plan(
        job(parallelism=8),
        workload="wl",
        cluster_queue="cq",
        local_queue="lq",
        flavors=[],
        admitted_count=5,
    )
    assert plan.parallelism == 5


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([{"type": "Complete", "status": "True"}], (True, "Succeeded"), id="complete"),
        pytest.param([{"type": "Failed", "status": "True"}], (True, "Failed"), id="failed"),
        pytest.param([{"type": "Suspended", "status": "True"}], (False, ""), id="suspended"),
    ],
)
def test_job_finished_reads_complete_and_failed(
    conditions: list[dict[str, str]], expected: tuple[bool, str]
) -> None:
    j = Job.from_dict({"metadata": {"name": "j"}, "status": {"conditions": conditions}})
    finished, reason, _ = jf.job_finished(j)
    assert (finished, reason) == expected


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        pytest.param("team-a", True, id="label"),
        pytest.param("team.a.b", True, id="subdomain"),
        pytest.param("UPPER_case", False, id="upper-and-underscore"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a." * 127 + "a", False, id="too-long"),
    ],
)
def test_queue_names_must_be_dns1123_subdomains(name: str, valid: bool) -> None:
    error = jf.queue_name_error(name)
    assert (error is None) is valid
    if error is not None:
        assert error.startswith('metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "')


def _labelled(queue: str | None, *, suspend: bool) -> Job:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return job(metadata={"labels": labels}, suspend=suspend)


@pytest.mark.parametrize(
    ("old", "new", "suspend", "refused"),
    [
        pytest.param("a", "b", False, True, id="changed-while-running"),
        pytest.param("a", None, False, True, id="removed-while-running"),
        pytest.param("a", "b", True, False, id="changed-while-suspended"),
        pytest.param("a", None, True, False, id="removed-while-suspended"),
        pytest.param("a", "a", False, False, id="unchanged"),
        pytest.param("a", "Bad_Name", True, True, id="invalid-new-name"),
    ],
)
def test_queue_name_changes_are_refused_only_on_running_jobs(
    old: str, new: str | None, suspend: bool, refused: bool
) -> None:
    errors = jf.job_update_errors(_labelled(old, suspend=suspend), _labelled(new, suspend=suspend))
    assert bool(errors) is refused
    if refused and new != "Bad_Name":
        assert errors == [
            f'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "{new or ""}": '
            "field is immutable"
        ]


def _queued(label: str, value: str | None, *, suspend: bool) -> Job:
    """A Job in queue `q`, with `label` set to `value` (None: without it)."""
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    if value is not None:
        labels[label] = value
    return job(metadata={"labels": labels}, suspend=suspend)


def _limited(limit: str | None, *, suspend: bool) -> Job:
    return _queued("kueue.x-k8s.io/max-exec-time-seconds", limit, suspend=suspend)


LIMIT_FIELD = "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"


@pytest.mark.parametrize(
    ("old", "new", "was", "now", "errors"),
    [
        pytest.param("60", "60", False, False, [], id="unchanged-while-running"),
        pytest.param("60", "120", True, True, [], id="changed-while-suspended"),
        pytest.param(None, "120", True, True, [], id="added-while-suspended"),
        pytest.param(
            "60", "120", False, False, [f'{LIMIT_FIELD}: Invalid value: "120": field is immutable'],
            id="changed-while-running",
        ),
        pytest.param(
            "60", "120", True, False, [f'{LIMIT_FIELD}: Invalid value: "120": field is immutable'],
            id="changed-as-it-starts",
        ),
        pytest.param(
            "60", None, False, True, [f'{LIMIT_FIELD}: Invalid value: "": field is immutable'],
            id="removed-as-it-stops",
        ),
        pytest.param(
            "60", "0", True, True, [f'{LIMIT_FIELD}: Invalid value: "0": must be greater than 0'],
            id="invalid-while-suspended",
        ),
    ],
)  # fmt: skip
def test_the_max_exec_time_label_changes_only_while_the_job_stays_suspended(
    old: str | None, new: str | None, was: bool, now: bool, errors: list[str]
) -> None:
    """Kueue's update rule for the label: valid, and immutable unless the object is
    suspended before and after the update."""
    assert jf.job_update_errors(_limited(old, suspend=was), _limited(new, suspend=now)) == errors


def test_a_leaderworkersets_max_exec_time_label_is_not_checked_on_update() -> None:
    def group(limit: str) -> LeaderWorkerSet:
        return LeaderWorkerSet.from_dict(
            {
                "metadata": {
                    "name": "s",
                    "namespace": "ns",
                    "labels": {"kueue.x-k8s.io/max-exec-time-seconds": limit},
                },
                "spec": {"leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {}}}},
            }
        )

    changed = jf.job_update_errors(group("60"), group("0"), suspended=False, was_suspended=False)
    assert changed == []


def test_a_job_matches_its_workload_until_its_parallelism_or_requests_change() -> None:
    base = job(parallelism=2, template={"spec": {"containers": [{"name": "c", "image": "x"}]}})
    wl = jf.build_workload(base, jf.Priority(0, None))
    assert jf.workload_mismatch(base, wl) is None
    raw = base.to_dict()
    raw["spec"]["parallelism"] = 8
    assert jf.workload_mismatch(Job.from_dict(raw), wl) == "the Job has 8 pods, its Workload 2"
    raw = base.to_dict()
    raw["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
    assert jf.workload_mismatch(Job.from_dict(raw), wl) == "the containers' resources changed"
    assert jf.workload_mismatch(base, wl, admitted_count=1) == (
        "its admission is for 1 pods, its Workload 2"  # made for an older spec
    )
    raw = base.to_dict()
    raw["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    partial = jf.build_workload(Job.from_dict(raw), jf.Priority(0, None))
    raw["spec"]["parallelism"] = 1  # a partial admission started it with 1 pod
    assert jf.workload_mismatch(Job.from_dict(raw), partial, admitted_count=1) is None


@pytest.mark.parametrize(
    ("old", "new", "suspends"),
    [
        pytest.param((False, 2), (False, 8), True, id="running-parallelism-raised"),
        pytest.param((False, 2), (False, 2), False, id="running-unchanged"),
        pytest.param((True, 2), (False, 1), False, id="started-with-partial-admission"),
        pytest.param((False, 2), (True, 8), False, id="stopped-in-the-same-write"),
    ],
)
def test_a_running_jobs_pod_count_change_suspends_it_in_the_same_write(
    old: tuple[bool, int], new: tuple[bool, int], suspends: bool
) -> None:
    before = job(suspend=old[0], parallelism=old[1])
    after = job(suspend=new[0], parallelism=new[1])
    assert jf.suspends_on_update(before, after) is suspends


@pytest.mark.parametrize(
    ("raw", "limit"),
    [
        pytest.param("600", 600, id="seconds"),
        pytest.param("1", 1, id="one"),
        pytest.param("2147483647", 2147483647, id="int32-max"),
        pytest.param("0", None, id="zero-is-no-limit"),
        pytest.param("2147483648", None, id="past-int32"),
        pytest.param("-5", None, id="negative"),
        pytest.param("+30", 30, id="plus-sign"),
        pytest.param("-0", None, id="minus-zero"),
        pytest.param("+", None, id="sign-only"),
        pytest.param("+-3", None, id="two-signs"),
        pytest.param("030", 30, id="leading-zero"),
        pytest.param("", None, id="empty"),
        pytest.param("10m", None, id="not-an-integer"),
        pytest.param("１２", None, id="non-ascii-digits"),
    ],
)
def test_max_exec_time_label_gives_a_positive_limit_or_none(raw: str, limit: int | None) -> None:
    """One reader of `kueue.x-k8s.io/max-exec-time-seconds` for the operator and the
    simulator: a value the Workload cannot carry (maximumExecutionTimeSeconds >= 1, int32)
    is no limit, never a Workload that fails validation."""
    labels = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/max-exec-time-seconds": raw}
    wl = jf.build_workload(job(metadata={"labels": labels}), jf.Priority(0, None))
    assert wl.spec.maximum_execution_time_seconds == limit


# -- reclaimable pods (Kueue's ReclaimablePods of batch/v1 Jobs) ----------------------------
def _done(spec: dict[str, Any], **status: Any) -> Job:
    j = job(**spec)
    return j.model_copy(update={"status": j.status.model_copy(update=status)})


@pytest.mark.parametrize(
    ("spec", "status", "reclaimable"),
    [
        pytest.param({"parallelism": 1, "completions": 5}, {"succeeded": 4}, 0, id="one-slot"),
        pytest.param({"parallelism": 4}, {"succeeded": 0}, 0, id="none-done"),
        pytest.param({"parallelism": 4}, {"succeeded": 1}, 1, id="completions-default"),
        pytest.param({"parallelism": 4, "completions": 10}, {"succeeded": 6}, 0, id="slots-full"),
        pytest.param({"parallelism": 4, "completions": 10}, {"succeeded": 7}, 1, id="one-free"),
        pytest.param({"parallelism": 4, "completions": 10}, {"succeeded": 12}, 4, id="over"),
        # 2 pods, not 4: the reclaimable pods never outnumber the Workload's (Kueue would
        # claim 3, which its validation refuses)
        pytest.param(
            {"parallelism": 4, "completions": 2}, {"succeeded": 1}, 1, id="parallelism-above"
        ),
        pytest.param(
            {"parallelism": 4, "completions": 8, "completionMode": "Indexed"},
            {"succeeded": 9, "completed_indexes": "0-2,5", "failed_indexes": "5-6"},
            1,
            id="indexed-union",
        ),
        pytest.param(
            {"parallelism": 2, "completions": 3, "completionMode": "Indexed"},
            {"completed_indexes": "1-9"},
            1,
            id="indexed-beyond-completions",
        ),
    ],
)
def test_reclaimable_pods_follow_kueues_formula(
    spec: dict[str, Any], status: dict[str, Any], reclaimable: int
) -> None:
    got = jf.reclaimable_pods(_done(spec, **status))
    assert [(p.name, p.count) for p in got] == ([("main", reclaimable)] if reclaimable else [])


@pytest.mark.parametrize(
    ("completed", "failed", "completions", "count"),
    [
        (None, None, 4, 0),
        ("0,2", None, 4, 2),
        ("0-3", "2-5", 8, 6),
        ("0-3", "2-5", 3, 3),
        ("x,1,2-,4-3", "", 8, 1),  # malformed and empty intervals are skipped
    ],
)
def test_terminal_indexes_count_each_index_once(
    completed: str | None, failed: str | None, completions: int, count: int
) -> None:
    assert jf.terminal_indexes(completed, failed, completions) == count


@given(
    parallelism=st.integers(1, 64),
    completions=st.integers(1, 200),
    done=st.integers(0, 250),
)
def test_reclaimable_pods_never_exceed_the_workloads_pods_and_grow_with_the_pods_done(
    parallelism: int, completions: int, done: int
) -> None:
    def count(n: int) -> int:
        spec = {"parallelism": parallelism, "completions": completions}
        got = jf.reclaimable_pods(_done(spec, succeeded=n))
        return got[0].count if got else 0

    slots = min(parallelism, completions)  # the Workload's pods
    now, later = count(done), count(done + 1)
    assert 0 <= now <= later <= slots
    # what is held covers the pods still to run (never a pod short)
    assert slots - now >= min(slots, max(completions - done, 0))


def test_an_indexed_jobs_done_indexes_are_read_from_its_status() -> None:
    raw = job(parallelism=2, completions=3, completionMode="Indexed").to_dict()
    raw["status"] = {"completedIndexes": "0", "failedIndexes": "2"}
    got = jf.reclaimable_pods(Job.from_dict(raw))
    assert [(p.name, p.count) for p in got] == [("main", 1)]


def test_pods_seen_succeeded_count_before_the_job_controller_does() -> None:
    # the pod watch saw 3 of 4 pods Succeeded; the Job's status still says 1
    j = _done({"parallelism": 4}, succeeded=1)
    seen = {("p0", None), ("p1", None), ("p2", None)}
    assert [(p.name, p.count) for p in jf.reclaimable_pods(j, seen)] == [("main", 3)]
    assert [(p.name, p.count) for p in jf.reclaimable_pods(j)] == [("main", 1)]
    # the status ahead of the watch: the larger count
    ahead = _done({"parallelism": 4}, succeeded=4)
    assert [(p.name, p.count) for p in jf.reclaimable_pods(ahead, seen)] == [("main", 4)]
    # an Indexed Job counts indexes: two pods of index 1 are one index done
    indexed = _done(
        {"parallelism": 3, "completions": 3, "completionMode": "Indexed"}, completed_indexes="0"
    )
    twice = {("a", 1), ("b", 1), ("c", None)}
    assert [(p.name, p.count) for p in jf.reclaimable_pods(indexed, twice)] == [("main", 2)]


def _pod(phase: str, owners: list[dict[str, Any]], index: str | None = None) -> Pod:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml", "ownerReferences": owners}
    if index is not None:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": index}
    spec = {"containers": [{"name": "c", "image": "x"}]}
    return Pod.from_dict({"metadata": meta, "spec": spec, "status": {"phase": phase}})


def test_a_succeeded_pod_names_the_job_that_controls_it() -> None:
    job_owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"}
    controls = {**job_owner, "controller": True}
    assert jf.succeeded_job_pod(_pod("Succeeded", [controls], "3")) == ("u1", "train", 3)
    assert jf.succeeded_job_pod(_pod("Succeeded", [controls])) == ("u1", "train", None)
    assert jf.succeeded_job_pod(_pod("Running", [controls])) is None
    assert jf.succeeded_job_pod(_pod("Failed", [controls])) is None
    assert jf.succeeded_job_pod(_pod("Succeeded", [job_owner])) is None  # not its controller
    other = {**controls, "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    assert jf.succeeded_job_pod(_pod("Succeeded", [other])) is None


def _classed(priority: str | None, *, suspend: bool) -> Job:
    return _queued("kueue.x-k8s.io/priority-class", priority, suspend=suspend)


PRIORITY_FIELD = "metadata.labels[kueue.x-k8s.io/priority-class]"


@pytest.mark.parametrize(
    ("old", "new", "now", "errors"),
    [
        pytest.param(None, "high", True, [], id="added-while-suspended"),
        pytest.param("low", "high", False, [], id="changed-while-running"),
        pytest.param(
            None, "high", False,
            [f'{PRIORITY_FIELD}: Invalid value: "high": WorkloadPriorityClass cannot be added '
             "to a non-suspended workload"],
            id="added-while-running",
        ),
        pytest.param(
            "low", None, True,
            [f'{PRIORITY_FIELD}: Invalid value: "": WorkloadPriorityClass cannot be removed '
             "from a workload"],
            id="removed-while-suspended",
        ),
        pytest.param(
            "low", "", False,
            [f'{PRIORITY_FIELD}: Invalid value: "": WorkloadPriorityClass cannot be removed '
             "from a workload"],
            id="emptied-while-running",
        ),
    ],
)  # fmt: skip
def test_the_priority_class_label_is_never_removed_nor_added_to_a_running_job(
    old: str | None, new: str | None, now: bool, errors: list[str]
) -> None:
    """Kueue's update rule (`ValidateUpdateForWorkloadPriorityClassName`): now that the
    webhook may give the label itself, taking it away again is refused."""
    assert jf.job_update_errors(_classed(old, suspend=True), _classed(new, suspend=now)) == errors

"""The Job integration: Workload names, pod counts, priorities and start plans as Kueue's."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.core import Job, PriorityClass
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

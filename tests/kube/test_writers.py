"""The writer's merge patches of an MPIJob: mpiReplicaSpecs is a map, so a patch must say
with null what a pod template loses, and leave alone what it keeps."""

from __future__ import annotations

from typing import Any

from atoll.kube.writers import _mpijob_patch, _template_patch

STARTED: dict[str, Any] = {
    "metadata": {
        "labels": {"app": "pi", "kueue.x-k8s.io/podset": "worker"},
        "annotations": {"kueue.x-k8s.io/workload": "mpijob-pi-1"},
    },
    "spec": {
        "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "containers": [{"name": "c"}],
    },
}


def test_restoring_a_template_deletes_what_the_start_added_with_null() -> None:
    patch = _template_patch(
        STARTED,
        labels={"app": "pi"},
        annotations={},
        node_selector={},
        tolerations=[],
        gates=[],
    )
    assert patch == {
        "metadata": {"labels": {"app": "pi", "kueue.x-k8s.io/podset": None}, "annotations": None},
        "spec": {"nodeSelector": None, "tolerations": None},
    }


def test_a_template_that_already_has_the_fields_needs_no_patch() -> None:
    meta, spec = STARTED["metadata"], STARTED["spec"]
    patch = _template_patch(
        STARTED,
        labels=meta["labels"],
        annotations=meta["annotations"],
        node_selector=spec["nodeSelector"],
        tolerations=spec["tolerations"],
        gates=[],
    )
    assert patch == {}


def test_lists_are_replaced_whole_and_maps_merged() -> None:
    patch = _template_patch(
        {"metadata": {}, "spec": {"tolerations": [{"key": "old"}]}},
        labels={"kueue.x-k8s.io/podset": "launcher"},
        annotations={},
        node_selector={"pool": "h100"},
        tolerations=[{"key": "new"}],
        gates=[{"name": "kueue.x-k8s.io/topology"}],
    )
    assert patch == {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": "launcher"}},
        "spec": {
            "nodeSelector": {"pool": "h100"},
            "tolerations": [{"key": "new"}],
            "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
        },
    }


def test_the_mpijob_patch_sets_the_run_policy_and_only_the_changed_replica_types() -> None:
    assert _mpijob_patch(True, {}) == {"spec": {"runPolicy": {"suspend": True}}}
    assert _mpijob_patch(False, {"Worker": {"metadata": {"labels": {"a": "b"}}}}) == {
        "spec": {
            "runPolicy": {"suspend": False},
            "mpiReplicaSpecs": {"Worker": {"template": {"metadata": {"labels": {"a": "b"}}}}},
        }
    }

"""Admission checks on the sandbox, with the test playing the check's controller (as a
ProvisioningRequest or MultiKueue controller would): the ClusterQueue waits for the
AdmissionCheck to be Active; a Job's Workload gets its quota reserved and a Pending check,
and the Job stays suspended until the check is Ready; then it runs with the check's
podSetUpdates. A Rejected check deactivates the Workload."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    create,
    get_json,
    is_true,
    workload_of,
)

pytestmark = pytest.mark.cluster
NOW = "2026-12-01T00:00:00Z"


def _check(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": "example.com/test-provisioner"},
    }


def _patch_status(cluster: KubeCluster, *target: str, status: dict[str, Any]) -> None:
    cluster.kubectl(
        "patch",
        *target,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def _set_check(
    cluster: KubeCluster, ns: str, wl: str, check: str, state: str, **extra: Any
) -> None:
    """What the check's controller writes into the Workload."""
    entry = {
        "name": check,
        "state": state,
        "lastTransitionTime": NOW,
        "message": f"the test provisioner says {state}",
        **extra,
    }
    _patch_status(cluster, "workload", wl, "-n", ns, status={"admissionChecks": [entry]})


def _checked_queue(cluster: KubeCluster, ns: str) -> str:
    """An AdmissionCheck `prov-<ns>` (not Active yet) and a ClusterQueue `cq-<ns>` of 4 GPUs
    that names it, with the LocalQueue `q`; the check's name."""
    check, rf, cq = f"prov-{ns}", f"rf-{ns}", f"cq-{ns}"
    queue = b.cluster_queue(cq, rf, gpus=4)
    queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    apply(cluster, _check(check), b.flavor(rf), queue, b.local_queue("q", ns, cq))
    return check


def _activate(cluster: KubeCluster, check: str) -> None:
    """What the check's controller does at start, Active=True; then its ClusterQueue is."""
    active = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "the test provisioner is running",
        "lastTransitionTime": NOW,
    }
    _patch_status(cluster, "admissioncheck", check, status={"conditions": [active]})
    cq = f"cq-{check.removeprefix('prov-')}"
    cluster.wait_for(
        "ClusterQueue active",
        lambda: is_true(get_json(cluster, "get", "clusterqueue", cq), "Active"),
    )


def _reserved(cluster: KubeCluster, ns: str, name: str, *, pods: int) -> dict[str, Any]:
    """A Job `name` created and its Workload once its quota is reserved."""
    create(cluster, b.job(name, ns, queue="q", pods=pods, gpus=1, run="600s"))
    cluster.wait_for(
        f"{name}: quota reserved", lambda: is_true(workload_of(cluster, ns, name), "QuotaReserved")
    )
    wl = workload_of(cluster, ns, name)
    assert wl is not None
    return wl


def _seconds(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def _cq_active(cluster: KubeCluster, cq: str) -> dict[str, Any] | None:
    return condition(get_json(cluster, "get", "clusterqueue", cq), "Active")


def test_a_job_runs_once_its_admission_check_is_ready_and_a_rejected_one_is_deactivated(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    check = _checked_queue(cluster, namespace)
    cq = f"cq-{namespace}"
    cluster.wait_for(
        "ClusterQueue inactive: its check is not Active yet",
        lambda: (_cq_active(cluster, cq) or {}).get("reason") == "AdmissionCheckInactive",
    )
    _activate(cluster, check)

    wl = _reserved(cluster, namespace, "train", pods=2)
    assert [(c["name"], c["state"]) for c in wl["status"]["admissionChecks"]] == [
        (check, "Pending")
    ]
    assert (condition(wl, "Admitted") or {}).get("reason") == "UnsatisfiedChecks"
    assert get_json(cluster, "get", "job", "train", "-n", namespace)["spec"]["suspend"] is True

    update = {"name": "main", "labels": {"provisioned": "yes"}}
    _set_check(cluster, namespace, wl["metadata"]["name"], check, "Ready", podSetUpdates=[update])
    cluster.wait_for(
        "train admitted and started",
        lambda: not get_json(cluster, "get", "job", "train", "-n", namespace)["spec"]["suspend"],
        timeout=60,
    )
    assert is_true(workload_of(cluster, namespace, "train"), "Admitted")
    job = get_json(cluster, "get", "job", "train", "-n", namespace)
    assert job["spec"]["template"]["metadata"]["labels"]["provisioned"] == "yes"

    refused = _reserved(cluster, namespace, "refused", pods=1)
    _set_check(cluster, namespace, refused["metadata"]["name"], check, "Rejected")

    def deactivated() -> bool:
        wl = workload_of(cluster, namespace, "refused")
        evicted = condition(wl, "Evicted") or {}
        return (
            wl is not None
            and wl["spec"].get("active") is False
            and (evicted.get("reason") == "DeactivatedDueToAdmissionCheck")
        )

    cluster.wait_for("refused deactivated", deactivated, timeout=60)
    cluster.wait_for(
        "refused's quota released",
        lambda: not is_true(workload_of(cluster, namespace, "refused"), "QuotaReserved"),
        timeout=60,
    )
    assert get_json(cluster, "get", "job", "refused", "-n", namespace)["spec"]["suspend"] is True


def test_a_retried_check_gives_the_quota_back_and_the_workload_queues_again(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    """Retry (say, the provisioned capacity went away): the Workload is evicted with reason
    AdmissionCheck, its quota goes back, and after the check's requeueAfterSeconds it is
    reserved again with its checks reset to Pending."""
    check = _checked_queue(cluster, namespace)
    _activate(cluster, check)
    wl = _reserved(cluster, namespace, "again", pods=1)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    retry = {"requeueAfterSeconds": 3, "lastTransitionTime": now}
    _set_check(cluster, namespace, wl["metadata"]["name"], check, "Retry", **retry)

    def reserved_again() -> bool:
        wl = workload_of(cluster, namespace, "again")
        evicted = condition(wl, "Evicted") or {}
        return is_true(wl, "QuotaReserved") and evicted.get("message") == (
            "Previously: At least one admission check is false"
        )

    cluster.wait_for("again evicted by its check, then reserved again", reserved_again, timeout=60)
    wl = workload_of(cluster, namespace, "again")
    assert wl is not None
    (state,) = wl["status"]["admissionChecks"]
    assert (state["state"], state.get("retryCount")) == ("Pending", 1)
    assert not is_true(wl, "Admitted")
    assert get_json(cluster, "get", "job", "again", "-n", namespace)["spec"]["suspend"] is True
    stats = wl["status"]["schedulingStats"]["evictions"]
    assert stats == [{"count": 1, "reason": "AdmissionCheck", "underlyingCause": ""}]
    reserved = condition(wl, "QuotaReserved") or {}
    waited = _seconds(reserved["lastTransitionTime"]) - _seconds(now)
    assert waited >= 2, waited  # the check's requeueAfterSeconds (3), to the second

"""Quota for DRA devices on the sandbox, as Kueue's `resources.deviceClassMappings` defines it:
an operator configured to map DeviceClass `gpu.atoll.dev` to `example.com/gpu` charges each
device of a pod's claim as 1 `example.com/gpu`, so a ClusterQueue with 4 admits two Jobs whose
pod claims an NVLink pair and keeps the third pending with Kueue's quota message; a Job whose
ResourceClaimTemplate is created after it waits `Inadmissible` (Kueue's reason) and is admitted
once it exists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO, KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    get_json,
    is_true,
    replacing_operator,
    workload_of,
)

pytestmark = pytest.mark.cluster
QUOTA = "example.com/gpu"
MAPPINGS = json.dumps([{"name": QUOTA, "deviceClassNames": ["gpu.atoll.dev"]}])


@pytest.fixture(scope="module")
def dra_operator(
    cluster: KubeCluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`atoll run` with the device class mapping, in place of the session's operator (two
    leaders would both admit); the session's operator is started again afterwards."""
    cluster.add_shape(REPO / "examples" / "clusters" / "pcie-bridged-pairs.yaml")
    with replacing_operator(
        cluster,
        operator,
        tmp_path_factory.mktemp("dra-operator"),
        "--set",
        f"resources.deviceClassMappings={MAPPINGS}",
    ) as op:
        yield op


def _queue(cluster: KubeCluster, namespace: str, *, devices: int) -> str:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", QUOTA],
                "flavors": [
                    {
                        "name": rf,
                        "resources": [
                            {"name": "cpu", "nominalQuota": 100},
                            {"name": QUOTA, "nominalQuota": devices},
                        ],
                    }
                ],
            }
        ],
    }
    apply(
        cluster,
        b.flavor(rf),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": spec,
        },
        b.local_queue("q", namespace, cq),
    )
    return cq


def _pair_job(name: str, namespace: str, template: str, *, run: str) -> dict[str, Any]:
    job = b.job(name, namespace, queue="q", pods=1, gpus=0, run=run)
    spec = job["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"atoll.dev/node-group": "pcie"}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    return job


def _create(cluster: KubeCluster, *objs: dict[str, Any]) -> None:
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


def _quota_reserved(cluster: KubeCluster, namespace: str, job: str) -> dict[str, Any]:
    return condition(workload_of(cluster, namespace, job), "QuotaReserved") or {}


def _cq_usage(cluster: KubeCluster, cq: str) -> dict[str, str]:
    status = get_json(cluster, "get", "clusterqueues", cq).get("status") or {}
    return {
        r["name"]: str(r["total"])
        for f in status.get("flavorsUsage") or []
        for r in f.get("resources") or []
    }


def _state(cluster: KubeCluster, namespace: str, op: OperatorProcess) -> str:
    """Each Workload's conditions, the pods' phases and nodes, and the operator log's tail,
    for a failure message."""
    lines = []
    for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
        for c in (wl.get("status") or {}).get("conditions") or []:
            lines.append(
                f"workload {wl['metadata']['name']} {c['type']}={c['status']} {c.get('reason')}:"
                f" {c.get('message')} ({c.get('lastTransitionTime')})"
            )
    for p in get_json(cluster, "get", "pods", "-n", namespace)["items"]:
        lines.append(
            f"pod {p['metadata']['name']}: {p['status'].get('phase')}"
            f" node={p['spec'].get('nodeName')} started={p['status'].get('startTime')}"
        )
    return "\n".join([*lines, "operator log:", op.tail(30)])


def test_quota_of_four_devices_admits_two_pair_jobs_and_holds_the_third(
    cluster: KubeCluster, dra_operator: OperatorProcess, namespace: str
) -> None:
    cq = _queue(cluster, namespace, devices=4)
    apply(cluster, b.island_claim_template(namespace, "pair"))
    # Created one by one, so queue order (creation time) is a, b, c.
    for name in ("a", "b", "c"):
        _create(cluster, _pair_job(name, namespace, "pair", run="120s"))
        cluster.wait_for(
            f"workload of {name}", lambda n=name: workload_of(cluster, namespace, n) is not None
        )
    try:
        cluster.wait_for(
            "a and b admitted",
            lambda: all(is_true(workload_of(cluster, namespace, n), "Admitted") for n in "ab"),
        )
        cluster.wait_for(
            "c waiting for quota",
            lambda: (
                _quota_reserved(cluster, namespace, "c").get("reason") == "Pending"
                and "insufficient unused quota"
                in _quota_reserved(cluster, namespace, "c")["message"]
            ),
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_state(cluster, namespace, dra_operator)}") from e
    held = _quota_reserved(cluster, namespace, "c")
    assert held["status"] == "False"
    assert (
        f"insufficient unused quota for {QUOTA} in flavor rf-{namespace}, 2 more needed"
        in (held["message"])
    )
    for name in "ab":
        wl = workload_of(cluster, namespace, name)
        assert wl is not None
        (psa,) = wl["status"]["admission"]["podSetAssignments"]
        assert psa["resourceUsage"][QUOTA] == "2"
        assert psa["flavors"][QUOTA] == f"rf-{namespace}"
        # As in Kueue, the device quota is computed, not written into the Workload's spec.
        (container,) = wl["spec"]["podSets"][0]["template"]["spec"]["containers"]
        assert QUOTA not in container["resources"].get("requests", {})
    cluster.wait_for("ClusterQueue usage", lambda: _cq_usage(cluster, cq).get(QUOTA) == "4")
    assert not is_true(workload_of(cluster, namespace, "c"), "QuotaReserved")


def test_a_job_whose_template_comes_later_waits_inadmissible_then_is_admitted(
    cluster: KubeCluster, dra_operator: OperatorProcess, namespace: str
) -> None:
    _queue(cluster, namespace, devices=2)
    _create(cluster, _pair_job("late", namespace, "late-pair", run="5s"))
    cluster.wait_for(
        "an Inadmissible reason",
        lambda: _quota_reserved(cluster, namespace, "late").get("reason") == "Inadmissible",
    )
    message = _quota_reserved(cluster, namespace, "late")["message"]
    assert message == (
        "spec.podSets[0].template.spec.resourceClaims[0]: Internal error: failed to get claim "
        "spec for ResourceClaimTemplate late-pair in podset main: "
        'resourceclaimtemplates.resource.k8s.io "late-pair" not found'
    )
    apply(cluster, b.island_claim_template(namespace, "late-pair"))
    cluster.wait_for(
        "admitted once the template exists",
        lambda: is_true(workload_of(cluster, namespace, "late"), "Admitted"),
    )
    wl = workload_of(cluster, namespace, "late")
    assert wl is not None
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][QUOTA] == "2"

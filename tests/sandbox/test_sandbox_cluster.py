"""The sandbox is a real control plane: CRDs, Jobs scheduled onto fake GPU nodes, DRA."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from atoll.sandbox import binaries
from atoll.sandbox.cluster import COMPONENTS, Sandbox
from atoll.sandbox.processes import is_ours
from atoll.sandbox.shapes import DRA_DRIVER, ISLAND_ATTRIBUTE
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.atoll.dev}
spec:
  group: test.atoll.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
"""


def _json(cluster: KubeCluster, *args: str) -> dict:  # type: ignore[type-arg]
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def test_custom_resource_definition_round_trips(cluster: KubeCluster, namespace: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=WIDGET_CRD)
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.test.atoll.dev")
    widget = {
        "apiVersion": "test.atoll.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(widget))
    assert _json(cluster, "get", "widget", "w1", "-n", namespace)["spec"] == {"size": 3}
    bad = dict(widget, metadata={"name": "w2", "namespace": namespace}, spec={"size": 0})
    rejected = cluster.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert rejected.returncode != 0
    assert "spec.size" in rejected.stderr


def _gpu_job(name: str, namespace: str, pods: int, run: str = "1s") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {
                    "metadata": {"annotations": {"atoll.dev/run-duration": run}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "train",
                                "image": "registry.invalid/atoll/sleep:1",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    },
                },
            },
        }
    )


def test_job_pods_are_scheduled_on_gpu_nodes_and_complete(
    cluster: KubeCluster, namespace: str
) -> None:
    cluster.kubectl("create", "-f", "-", input=_gpu_job("train", namespace, pods=3))
    cluster.kubectl(
        "wait",
        "--for=condition=Complete",
        "job/train",
        "-n",
        namespace,
        "--timeout=90s",
        timeout=100,
    )
    pods = _json(cluster, "get", "pods", "-n", namespace, "-l", "job-name=train")["items"]
    assert len(pods) == 3
    gpu_nodes = {
        n["metadata"]["name"]
        for n in _json(cluster, "get", "nodes")["items"]
        if int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) > 0
    }
    assert all(p["spec"]["nodeName"] in gpu_nodes for p in pods)
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)


def test_claim_with_match_attribute_gets_two_devices_from_one_island(
    cluster: KubeCluster, namespace: str
) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-pair", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": 2}}
                    ],
                    "constraints": [{"matchAttribute": ISLAND_ATTRIBUTE}],
                }
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pair", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-pair"}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/atoll/sleep:1",
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(template))
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    cluster.kubectl(
        "wait", "--for=condition=Ready", "pod/pair", "-n", namespace, "--timeout=60s", timeout=70
    )
    claims = _json(cluster, "get", "resourceclaims", "-n", namespace)["items"]
    assert len(claims) == 1
    results = claims[0]["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2
    pools = {r["pool"] for r in results}
    assert len(pools) == 1
    slices = _json(cluster, "get", "resourceslices")["items"]
    (node_slice,) = [s for s in slices if s["spec"]["pool"]["name"] in pools]
    island = {d["name"]: d["attributes"]["island"]["int"] for d in node_slice["spec"]["devices"]}
    assert len({island[r["device"]] for r in results}) == 1


def test_second_up_is_harmless_and_down_leaves_no_process(tmp_path: Path) -> None:
    if binaries.missing():
        pytest.fail(f"sandbox binaries missing: {binaries.missing()}")
    sandbox = Sandbox(root=tmp_path / "sb")
    try:
        first = sandbox.up(log=lambda _m: None)
        assert [p.name for p in first.procs] == list(COMPONENTS)
        second = sandbox.up(log=lambda _m: None)
        assert [p.pid for p in second.procs] == [p.pid for p in first.procs]
        assert sandbox.is_running()
    finally:
        sandbox.down(log=lambda _m: None)
    assert not any(is_ours(p) for p in first.procs)
    assert not sandbox.root.exists()
    assert not os.path.exists(first.etcd_dir)

"""Real-hardware formats on the sandbox (issue 17): ResourceSlices as NVIDIA's GPU DRA driver
publishes them (`examples/clusters/nvidia-dra.yaml`: PCIe-root pairs, a CEL selector on
`productName`, quota through `deviceClassMappings` on `gpu.nvidia.com`), a device-plugin
cluster labelled by GPU Feature Discovery (`gfd-device-plugin.yaml`: a clique-required gang
in one `nvidia.com/gpu.clique`), and NVLink islands published by `atoll topology discover`
on its workstations, then used to admit island-bound gangs.

Node groups here (nvh100, nvl40s, gfdgb, ws6000) belong to no other test module's shape, so
their devices and GPUs are this module's alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from atoll.sandbox.shapes import NVIDIA_DRIVER
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
GROUP = "atoll.dev/node-group"
CLIQUE = "nvidia.com/gpu.clique"
HOSTNAME = "kubernetes.io/hostname"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
QUOTA = "example.com/gpu"
SHAPES = REPO / "examples" / "clusters"
FIXTURES = REPO / "examples" / "nvidia-smi"


@pytest.fixture(scope="module")
def nvidia(cluster: KubeCluster) -> list[str]:
    return cluster.add_shape(SHAPES / "nvidia-dra.yaml")


@pytest.fixture(scope="module")
def gfd(cluster: KubeCluster) -> list[str]:
    return cluster.add_shape(SHAPES / "gfd-device-plugin.yaml")


# --- manifests and reading -----------------------------------------------------------------


def _template(
    ns: str, name: str, count: int, *, match: str | None = None, selector: str | None = None
) -> dict[str, Any]:
    """A ResourceClaimTemplate for `count` full GPUs of NVIDIA's DeviceClass."""
    exactly: dict[str, Any] = {"deviceClassName": NVIDIA_DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": devices}},
    }


def _queue(
    cluster: KubeCluster,
    ns: str,
    node_labels: dict[str, str] | None,
    *extra: dict[str, Any],
    topology: str | None = None,
) -> None:
    rf = b.flavor(f"rf-{ns}", node_labels=node_labels)
    if topology:
        rf["spec"]["topologyName"] = topology
    apply(cluster, *extra, rf, b.cluster_queue(f"cq-{ns}", f"rf-{ns}", gpus=1000))
    apply(cluster, b.local_queue("q", ns, f"cq-{ns}"))


def _create(cluster: KubeCluster, *objs: dict[str, Any]) -> None:
    items = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
    cluster.kubectl("create", "-f", "-", input=items)


def _pods(cluster: KubeCluster, ns: str, job: str) -> list[dict[str, Any]]:
    return list(get_json(cluster, "get", "pods", "-n", ns, "-l", f"job-name={job}")["items"])


def _bound(cluster: KubeCluster, ns: str, job: str, count: int) -> list[str]:
    def nodes() -> list[str]:
        return [p["spec"].get("nodeName", "") for p in _pods(cluster, ns, job)]

    cluster.wait_for(f"{count} pods of {job} bound", lambda: len(nodes()) == count and all(nodes()))
    return nodes()


def _pending(cluster: KubeCluster, ns: str, job: str) -> tuple[str, str]:
    cond = condition(workload_of(cluster, ns, job), "QuotaReserved") or {}
    return cond.get("reason", ""), cond.get("message", "")


def _waits(cluster: KubeCluster, ns: str, job: str, says: str) -> bool:
    """Whether the Job's Workload is pending (Kueue's reason `Pending`) with a message that
    says `says`: the message is what tells one cause from another."""
    reason, message = _pending(cluster, ns, job)
    return reason == "Pending" and says in message


def _placement_failed(cluster: KubeCluster, ns: str, job: str, says: str) -> str:
    """Waits until the Job's Workload is pending for its placement (`says` in the message);
    its message."""
    cluster.wait_for(f"{job} waits for placement", lambda: _waits(cluster, ns, job, says))
    return _pending(cluster, ns, job)[1]


def _admitted(cluster: KubeCluster, ns: str, *jobs: str) -> None:
    cluster.wait_for(
        f"{', '.join(jobs)} admitted",
        lambda: all(is_true(workload_of(cluster, ns, j), "Admitted") for j in jobs),
    )


def _device_attribute(cluster: KubeCluster, name: str) -> dict[tuple[str, str], str]:
    """(pool, device) → a string attribute of NVIDIA's devices."""
    out = {}
    for rs in get_json(cluster, "get", "resourceslices")["items"]:
        if rs["spec"]["driver"] == NVIDIA_DRIVER:
            for d in rs["spec"].get("devices") or []:
                out[(rs["spec"]["pool"]["name"], d["name"])] = d["attributes"][name]["string"]
    return out


def _allocated(cluster: KubeCluster, ns: str) -> list[list[tuple[str, str]]]:
    """Per allocated claim of the namespace, its (pool, device) list."""
    out = []
    for c in get_json(cluster, "get", "resourceclaims", "-n", ns)["items"]:
        alloc = (c.get("status") or {}).get("allocation")
        if alloc:
            results = alloc["devices"]["results"]
            assert {r["driver"] for r in results} == {NVIDIA_DRIVER}
            out.append([(r["pool"], r["device"]) for r in results])
    return out


# --- NVIDIA's DRA driver format --------------------------------------------------------------


def test_pcie_root_pairs_on_nvidia_slices_are_admitted_and_allocated_together(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, nvidia: list[str]
) -> None:
    _queue(
        cluster,
        namespace,
        {GROUP: "nvh100"},
        _template(namespace, "root-pair", 2, match=PCIE_ROOT),
    )
    _create(cluster, b.claim_job("pairs", namespace, pods=6, template="root-pair", run="8s"))
    _admitted(cluster, namespace, "pairs")
    assert set(_bound(cluster, namespace, "pairs", 6)) <= {"nvh100-0", "nvh100-1"}
    cluster.wait_for("6 claims allocated", lambda: len(_allocated(cluster, namespace)) == 6)
    roots = _device_attribute(cluster, PCIE_ROOT)
    for devices in _allocated(cluster, namespace):
        assert len(devices) == 2
        assert len({(pool, roots[(pool, d)]) for pool, d in devices}) == 1, devices


def test_product_name_selector_admits_on_the_l40s_and_the_rest_waits(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, nvidia: list[str]
) -> None:
    l40s = f"device.attributes['{NVIDIA_DRIVER}'].productName == 'NVIDIA L40S'"
    _queue(cluster, namespace, None, _template(namespace, "l40s-pair", 2, selector=l40s))
    _create(cluster, b.claim_job("first", namespace, pods=2, template="l40s-pair", run="15s"))
    _admitted(cluster, namespace, "first")
    assert _bound(cluster, namespace, "first", 2) == ["nvl40s-0", "nvl40s-0"]
    products = _device_attribute(cluster, "productName")
    cluster.wait_for("2 claims allocated", lambda: len(_allocated(cluster, namespace)) == 2)
    assert {products[d] for c in _allocated(cluster, namespace) for d in c} == {"NVIDIA L40S"}
    _create(cluster, b.claim_job("second", namespace, pods=1, template="l40s-pair", run="2s"))
    cluster.wait_for(
        "second waits for the L40S",
        lambda: (
            _waits(cluster, namespace, "second", "2 device(s)")
            or is_true(workload_of(cluster, namespace, "first"), "Finished")
        ),
    )
    if not is_true(workload_of(cluster, namespace, "first"), "Finished"):
        assert "2 device(s)" in _pending(cluster, namespace, "second")[1]
        assert _pods(cluster, namespace, "second") == []
    cluster.wait_for(
        "second runs after first",
        lambda: is_true(workload_of(cluster, namespace, "second"), "Admitted"),
        timeout=90,
    )


@pytest.fixture(scope="module")
def quota_operator(
    cluster: KubeCluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`atoll run` mapping NVIDIA's DeviceClass to a quota resource."""
    mappings = json.dumps([{"name": QUOTA, "deviceClassNames": [NVIDIA_DRIVER]}])
    with replacing_operator(
        cluster,
        operator,
        tmp_path_factory.mktemp("nvidia-quota"),
        "--set",
        f"resources.deviceClassMappings={mappings}",
    ) as op:
        yield op


def test_device_class_mapping_on_gpu_nvidia_com_charges_quota(
    cluster: KubeCluster, quota_operator: OperatorProcess, namespace: str, nvidia: list[str]
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    resources = [{"name": "cpu", "nominalQuota": 100}, {"name": QUOTA, "nominalQuota": 4}]
    apply(
        cluster,
        b.flavor(rf, node_labels={GROUP: "nvh100"}),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", QUOTA],
                        "flavors": [{"name": rf, "resources": resources}],
                    }
                ],
            },
        },
        b.local_queue("q", namespace, cq),
        _template(namespace, "root-pair", 2, match=PCIE_ROOT),
    )
    for name in ("a", "b", "c"):  # one by one: queue order a, b, c
        _create(cluster, b.claim_job(name, namespace, pods=1, template="root-pair", run="60s"))
        cluster.wait_for(f"workload of {name}", lambda n=name: workload_of(cluster, namespace, n))
    _admitted(cluster, namespace, "a", "b")
    cluster.wait_for(
        "c waits for quota",
        lambda: _waits(cluster, namespace, "c", "insufficient unused quota"),
    )
    assert (
        f"insufficient unused quota for {QUOTA} in flavor {rf}, 2 more needed"
        in (_pending(cluster, namespace, "c")[1])
    )
    wl = workload_of(cluster, namespace, "a")
    assert wl is not None
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][QUOTA] == "2"


# --- device plugin + GPU Feature Discovery labels ------------------------------------------------


def test_clique_required_gang_lands_in_one_gfd_clique(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, gfd: list[str]
) -> None:
    topo = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": f"topo-{namespace}"},
        "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOSTNAME}]},
    }
    _queue(cluster, namespace, {GROUP: "gfdgb"}, topo, topology=f"topo-{namespace}")
    _create(
        cluster,
        b.job("clq", namespace, queue="q", pods=4, gpus=4, run="8s", required_topology=CLIQUE),
        b.job("wide", namespace, queue="q", pods=5, gpus=4, run="2s", required_topology=CLIQUE),
    )
    _admitted(cluster, namespace, "clq")
    cliques = {
        n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE]
        for n in get_json(cluster, "get", "nodes", "-l", f"{GROUP}=gfdgb")["items"]
    }
    placed = _bound(cluster, namespace, "clq", 4)
    assert len(set(placed)) == 4, "one 4-GPU pod per 4-GPU tray"
    assert len({cliques[n] for n in placed}) == 1, placed
    message = _placement_failed(cluster, namespace, "wide", "pod set main needs 5 pods")
    # a clique of 4 trays cannot hold 5 pods of 4 GPUs: while clq runs only its other clique
    # has room ("8 eligible node(s) have room for 4"), otherwise "the largest has room for 4"
    assert "pod set main needs 5 pods" in message, message
    assert "room for 4" in message, message
    assert _pods(cluster, namespace, "wide") == []


# --- islands published by `atoll topology discover` ------------------------------------------


def _atoll(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`atoll topology ARGS --kubeconfig K` as a user runs it."""
    argv = [sys.executable, "-m", "atoll", "topology", *args]
    env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
    return subprocess.run(
        [*argv, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _discover(cluster: KubeCluster, node: str, fixture: str) -> subprocess.CompletedProcess[str]:
    fixture_path = str(FIXTURES / fixture)
    return _atoll(cluster, "discover", "--from-fixture", fixture_path, "--publish", "--node", node)


def _island_job(name: str, ns: str, *, pods: int, gpus: int, run: str) -> dict[str, Any]:
    job = b.job(name, ns, queue="q", pods=pods, gpus=gpus, run=run)
    job["spec"]["template"]["metadata"]["annotations"]["atoll.dev/nvlink-island"] = "required"
    return job


def test_discovered_islands_are_published_and_bound_gangs_admitted_by_them(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, gfd: list[str]
) -> None:
    workstations = ["ws6000-0", "ws6000-1"]
    bad = _discover(cluster, workstations[0], "../clusters/gfd-device-plugin.yaml")
    assert bad.returncode == 2, bad.stderr
    assert "nothing published" in bad.stderr
    for node in workstations:
        done = _discover(cluster, node, "rtx-a6000-2-pairs.txt")
        assert done.returncode == 0, done.stderr
        assert f"published on node {node}" in done.stdout
    for node in get_json(cluster, "get", "nodes", "-l", f"{GROUP}=ws6000")["items"]:
        meta = node["metadata"]
        assert meta["labels"]["atoll.dev/nvlink-island-max"] == "2"
        assert meta["labels"]["atoll.dev/nvlink-island-sizes"] == "2.2"
        doc = json.loads(meta["annotations"]["atoll.dev/nvlink-islands"])
        assert [[g["index"] for g in i["gpus"]] for i in doc["islands"]] == [[0, 1], [2, 3]]

    _queue(cluster, namespace, {GROUP: "ws6000"})
    _create(cluster, _island_job("pairs", namespace, pods=2, gpus=2, run="30s"))
    _admitted(cluster, namespace, "pairs")
    _bound(cluster, namespace, "pairs", 2)
    _create(cluster, _island_job("quad", namespace, pods=1, gpus=4, run="2s"))
    message = _placement_failed(cluster, namespace, "quad", "in one NVLink island")
    assert "each pod needs 4 nvidia.com/gpu in one NVLink island" in message, message
    assert "the largest free island has 2" in message, message
    assert _pods(cluster, namespace, "quad") == []

    shown = _atoll(cluster, "show")
    assert shown.returncode == 0, shown.stderr
    assert "ws6000-1: nvidia.com/gpu" in shown.stdout
    assert "NVLink islands (free/size)" in shown.stdout
    assert "nvidia.com/gpu.clique=9f3c2a71-nvl-0" in shown.stdout

"""GPU topology shapes on the sandbox (issue 6, "How it is checked"): 8-GPU single-pod gangs
on dgx-h100 nodes, a clique-required gang on gb200-nvl72, the bridged pair of lab-2x3090,
and NVLink pairs on pcie-bridged-pairs still admitted while earlier gangs run.

Every shape is added to the session's sandbox by name (`cluster.add_shape`: nodes that
already exist are kept, so other modules adding the same shape share its nodes); node group
names differ between shapes, and every ResourceFlavor here selects its shape's nodes through
`atoll.dev/node-group` so that no test places on another shape's nodes. GPUs are asked for
either as the `nvidia.com/gpu` extended resource the nodes expose or as DRA devices of the
class `gpu.atoll.dev` (one ResourceSlice per node, devices carrying `gpu.atoll.dev/island`).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from atoll.sandbox.shapes import DRA_DRIVER
from tests.conftest import REPO, KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, condition, get_json, is_true, workload_of

pytestmark = pytest.mark.cluster
GROUP = "atoll.dev/node-group"
CLIQUE = "nvidia.com/gpu.clique"
RACK = "topology.atoll.dev/rack"
BLOCK = "topology.atoll.dev/block"
HOSTNAME = "kubernetes.io/hostname"
SHAPES = REPO / "examples" / "clusters"


def _shape(cluster: KubeCluster, file: str, group: str) -> list[str]:
    names = cluster.add_shape(SHAPES / file)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    # add_shape keeps nodes that exist: make sure no other shape owns these names
    assert all(labels[n][GROUP] == group for n in names), f"node name clash in {file}"
    return names


@pytest.fixture(scope="module")
def dgx(cluster: KubeCluster) -> list[str]:
    return _shape(cluster, "dgx-h100.yaml", "dgx")


@pytest.fixture(scope="module")
def gb200(cluster: KubeCluster) -> list[str]:
    return _shape(cluster, "gb200-nvl72.yaml", "gb200")


@pytest.fixture(scope="module")
def lab(cluster: KubeCluster) -> list[str]:
    return _shape(cluster, "lab-2x3090.yaml", "lab")


@pytest.fixture(scope="module")
def pcie(cluster: KubeCluster) -> list[str]:
    return _shape(cluster, "pcie-bridged-pairs.yaml", "pcie")


# --- manifests -----------------------------------------------------------------------------


def _queue(
    cluster: KubeCluster,
    ns: str,
    node_labels: dict[str, str],
    *extra: dict[str, Any],
    topology: str | None = None,
    gpus: int = 1000,
) -> None:
    rf = b.flavor(f"rf-{ns}", node_labels=node_labels)
    if topology:
        rf["spec"]["topologyName"] = topology
    apply(
        cluster,
        *extra,
        rf,
        b.cluster_queue(f"cq-{ns}", f"rf-{ns}", gpus=gpus),
        b.local_queue("q", ns, f"cq-{ns}"),
    )


def _create(cluster: KubeCluster, *objs: dict[str, Any]) -> None:
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


# --- reading the cluster -------------------------------------------------------------------


def _pods(cluster: KubeCluster, ns: str, job: str | None = None) -> list[dict[str, Any]]:
    sel = ["-l", f"job-name={job}"] if job else []
    return list(get_json(cluster, "get", "pods", "-n", ns, *sel)["items"])


def _job_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"].get("labels", {}).get("job-name", ""))


def _reserving(cluster: KubeCluster, ns: str) -> set[str]:
    """Jobs whose Workload holds a reservation and is not finished."""
    out: set[str] = set()
    for wl in get_json(cluster, "get", "workloads", "-n", ns)["items"]:
        if is_true(wl, "QuotaReserved") and not is_true(wl, "Finished"):
            out.update(r["name"] for r in wl["metadata"].get("ownerReferences") or [])
    return out


def _succeeded(cluster: KubeCluster, ns: str) -> set[str]:
    jobs = get_json(cluster, "get", "jobs", "-n", ns)["items"]
    return {
        j["metadata"]["name"]
        for j in jobs
        if j["status"].get("succeeded", 0) == j["spec"]["completions"]
    }


def _island_of(cluster: KubeCluster) -> dict[tuple[str, str], int]:
    """(pool, device) → island attribute, from the sandbox's ResourceSlices."""
    out = {}
    for rs in get_json(cluster, "get", "resourceslices")["items"]:
        if rs["spec"]["driver"] != DRA_DRIVER:
            continue
        for dev in rs["spec"].get("devices") or []:
            out[(rs["spec"]["pool"]["name"], dev["name"])] = dev["attributes"]["island"]["int"]
    return out


def _claim_devices(cluster: KubeCluster, ns: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Owner pod (`namespace/name`) → (pool, device) of its allocated claims."""
    where = ["-n", ns] if ns else ["-A"]
    out: dict[str, list[tuple[str, str]]] = {}
    for c in get_json(cluster, "get", "resourceclaims", *where)["items"]:
        alloc = (c.get("status") or {}).get("allocation")
        if not alloc:
            continue
        owner = next(
            (r["name"] for r in c["metadata"].get("ownerReferences") or [] if r["kind"] == "Pod"),
            c["metadata"]["name"],
        )
        key = f"{c['metadata']['namespace']}/{owner}"
        for r in alloc["devices"]["results"]:
            assert r["driver"] == DRA_DRIVER
            out.setdefault(key, []).append((r["pool"], r["device"]))
    return out


def _wait_idle(cluster: KubeCluster, nodes: list[str]) -> None:
    """Until no claim (of any test) holds a device of these nodes (pools are named by node)."""
    pools = set(nodes)
    cluster.wait_for(
        f"devices of {nodes[0]}.. to be free",
        lambda: (
            not any(pool in pools for devs in _claim_devices(cluster).values() for pool, _ in devs)
        ),
        timeout=120,
    )


def _unschedulable(pod: dict[str, Any]) -> bool:
    """Not bound, and the scheduler found no node for it (no free devices)."""
    return not pod["spec"].get("nodeName") and any(
        c["type"] == "PodScheduled"
        and c["status"] == "False"
        and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or []
    )


def _active(pod: dict[str, Any]) -> bool:
    """Bound and not finished: it holds its node's devices."""
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _pending_reason(cluster: KubeCluster, ns: str, job: str) -> tuple[str, str]:
    cond = condition(workload_of(cluster, ns, job), "QuotaReserved") or {}
    return cond.get("reason", ""), cond.get("message", "")


def _waits(cluster: KubeCluster, ns: str, job: str, says: str) -> bool:
    """Whether the Job's Workload is pending (Kueue's reason `Pending`) with a message that
    says `says`: the message is what tells one cause from another."""
    reason, message = _pending_reason(cluster, ns, job)
    return reason == "Pending" and says in message


# --- dgx-h100 -------------------------------------------------------------------------------


def test_dgx_eight_gpu_gangs_each_take_one_node_and_the_extra_wait_whole(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    """One rack of dgx-h100 (4 nodes of 8 GPUs, one NVSwitch island each); 6 single-pod gangs
    asking for 8 GPUs in one island: 4 run at once, each alone on a node, the other 2 wait
    without a pod and run after them."""
    rack = {
        n["metadata"]["name"]
        for n in get_json(cluster, "get", "nodes", "-l", f"{RACK}=rack-3")["items"]
    }
    rack_nodes = sorted(rack & set(dgx))
    assert len(rack_nodes) == 4
    _wait_idle(cluster, rack_nodes)
    _queue(
        cluster,
        namespace,
        {GROUP: "dgx", RACK: "rack-3"},
        b.island_claim_template(namespace, "eight", 8),
    )
    jobs = [f"g{i}" for i in range(6)]
    _create(
        cluster, *[b.claim_job(j, namespace, pods=1, template="eight", run="12s") for j in jobs]
    )

    islands = _island_of(cluster)
    seen: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    waited: set[str] = set()
    most = 0
    stuck: set[str] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = _pods(cluster, namespace)
        holding = _reserving(cluster, namespace)
        most = max(most, len({_job_of(p) for p in pods if _active(p)}))
        stuck.update(p["metadata"]["name"] for p in pods if _unschedulable(p))
        with_pods = {_job_of(p) for p in pods}
        devices = _claim_devices(cluster, namespace)
        for p in pods:
            node = p["spec"].get("nodeName")
            got = devices.get(f"{namespace}/{p['metadata']['name']}")
            if node and got:
                seen[_job_of(p)] = (node, got)
        for j in jobs:
            if j in with_pods or j in holding:
                continue
            reason, message = _pending_reason(cluster, namespace, j)
            if reason == "Pending" and "device(s)" in message:  # waits for its devices
                waited.add(j)
                assert "8 device(s)" in message, message
        if _succeeded(cluster, namespace) == set(jobs):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"not every gang finished; seen {sorted(seen)}")
    assert most == 4, "exactly as many 8-GPU gangs as free nodes run at once"
    assert not stuck, "an admitted gang's pod waited for devices"
    assert len(waited) >= 2, "the gangs beyond the free nodes waited (no pod) with a reason"
    assert sorted(seen) == jobs
    for job, (node, devs) in seen.items():
        assert node in rack_nodes, job
        assert len(devs) == 8, (job, devs)
        assert {pool for pool, _ in devs} == {node}, (job, devs)
        assert len({islands[d] for d in devs}) == 1, (job, devs)


# --- gb200-nvl72 ----------------------------------------------------------------------------


def _clique_queue(cluster: KubeCluster, ns: str) -> None:
    topo = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": f"topo-{ns}"},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": CLIQUE}, {"nodeLabel": HOSTNAME}]},
    }
    _queue(cluster, ns, {GROUP: "gb200"}, topo, topology=f"topo-{ns}", gpus=144)


def _clique_job(name: str, ns: str, pods: int) -> dict[str, Any]:
    return b.job(name, ns, queue="q", pods=pods, gpus=4, run="10s", required_topology=CLIQUE)


def test_gb200_clique_required_gang_lands_inside_one_clique(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, gb200: list[str]
) -> None:
    _clique_queue(cluster, namespace)
    _create(cluster, _clique_job("nvl", namespace, 12))
    cluster.wait_for(
        "admitted", lambda: is_true(workload_of(cluster, namespace, "nvl"), "Admitted")
    )
    wl = workload_of(cluster, namespace, "nvl")
    assert wl is not None
    ta = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert ta["levels"] == [HOSTNAME]

    def nodes() -> list[str]:
        return [p["spec"].get("nodeName", "") for p in _pods(cluster, namespace, "nvl")]

    cluster.wait_for("12 pods bound", lambda: len(nodes()) == 12 and all(nodes()), timeout=90)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    placed = nodes()
    assert {labels[n][GROUP] for n in placed} == {"gb200"}
    assert len({labels[n][CLIQUE] for n in placed}) == 1
    assert len(set(placed)) == 12, "4 GPUs per pod: one pod per 4-GPU tray"
    cluster.wait_for("finished", lambda: _succeeded(cluster, namespace) == {"nvl"}, timeout=90)


def test_gb200_gang_larger_than_any_clique_waits_with_the_numbers(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, gb200: list[str]
) -> None:
    _clique_queue(cluster, namespace)
    _create(cluster, _clique_job("wide", namespace, 19))
    cluster.wait_for(
        "a placement reason",
        lambda: _waits(cluster, namespace, "wide", CLIQUE),
    )
    message = _pending_reason(cluster, namespace, "wide")[1]
    assert CLIQUE in message, message
    assert "19" in message, message
    room = re.search(r"room for (\d+)", message)
    assert room is not None, message
    assert int(room.group(1)) <= 18, message
    time.sleep(2)  # the wait is stable: still no reservation, no pod
    assert not is_true(workload_of(cluster, namespace, "wide"), "QuotaReserved")
    assert _pods(cluster, namespace) == []


# --- lab-2x3090 -----------------------------------------------------------------------------


def test_lab_two_gpu_job_lands_on_the_bridged_pair(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, lab: list[str]
) -> None:
    """The lab's one node has one NVLink-bridged pair: a 2-GPU job gets exactly it; a second
    one waits whole until the first finishes."""
    _wait_idle(cluster, lab)
    _queue(cluster, namespace, {GROUP: "lab"}, b.island_claim_template(namespace, "pair", 2))
    _create(cluster, b.claim_job("duo", namespace, pods=1, template="pair", run="8s"))

    def allocated() -> list[tuple[str, str]]:
        pods = _pods(cluster, namespace, "duo")
        if not pods or not pods[0]["spec"].get("nodeName"):
            return []
        return _claim_devices(cluster, namespace).get(
            f"{namespace}/{pods[0]['metadata']['name']}", []
        )

    cluster.wait_for("the pair allocated", lambda: len(allocated()) == 2, timeout=90)
    devs = allocated()
    assert _pods(cluster, namespace, "duo")[0]["spec"]["nodeName"] == lab[0]
    islands = _island_of(cluster)
    bridged = {d for d, island in islands.items() if d[0] == lab[0] and island == islands[devs[0]]}
    assert len(bridged) == 2, bridged
    assert set(devs) == bridged

    _create(cluster, b.claim_job("trio", namespace, pods=1, template="pair", run="2s"))
    cluster.wait_for(
        "the second job to wait for the pair",
        lambda: (
            _waits(cluster, namespace, "trio", "device(s)")
            or "trio" in _succeeded(cluster, namespace)
        ),
    )
    if "duo" not in _succeeded(cluster, namespace):
        assert _pods(cluster, namespace, "trio") == []
    cluster.wait_for(
        "both done", lambda: _succeeded(cluster, namespace) == {"duo", "trio"}, timeout=120
    )


# --- pcie-bridged-pairs ---------------------------------------------------------------------


def test_pairs_are_admitted_while_earlier_gangs_run(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, pcie: list[str]
) -> None:
    """16 bridged pairs: 4 gangs of 2 pair-pods run (8 pairs); 4 more gangs submitted then
    are all admitted at once, without waiting for the first ones, and every pod gets a pair."""
    _wait_idle(cluster, pcie)
    _queue(cluster, namespace, {GROUP: "pcie"}, b.island_claim_template(namespace, "pair", 2))
    first = [f"a{i}" for i in range(4)]
    _create(
        cluster, *[b.claim_job(j, namespace, pods=2, template="pair", run="60s") for j in first]
    )

    def running(jobs: list[str]) -> int:
        devices = _claim_devices(cluster, namespace)
        return sum(
            1
            for p in _pods(cluster, namespace)
            if _job_of(p) in jobs
            and p["spec"].get("nodeName")
            and f"{namespace}/{p['metadata']['name']}" in devices
        )

    cluster.wait_for("8 pods of the first gangs on their pairs", lambda: running(first) == 8)
    second = [f"b{i}" for i in range(4)]
    _create(
        cluster, *[b.claim_job(j, namespace, pods=2, template="pair", run="60s") for j in second]
    )
    cluster.wait_for(
        "the second gangs admitted",
        lambda: set(second) <= _reserving(cluster, namespace),
        timeout=120,
    )
    assert not set(first) & _succeeded(cluster, namespace), "admitted only after the first ended"
    cluster.wait_for("16 pods on their pairs", lambda: running(first + second) == 16)
    islands = _island_of(cluster)
    for pod, devs in _claim_devices(cluster, namespace).items():
        assert len(devs) == 2, (pod, devs)
        assert len({islands[d] for d in devs}) == 1, (pod, devs)
        assert {pool for pool, _ in devs} <= set(pcie), (pod, devs)
    # leave the pairs idle for the tests after this one (they count free pairs)
    cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=true", timeout=120)
    _wait_idle(cluster, pcie)

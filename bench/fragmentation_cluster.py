"""Fragmentation on the sandbox: gangs of NVLink-pair pods with and without atoll.

    python bench/fragmentation_cluster.py [--jobs 10 --pods 2 --run 20s --json]

Starts a fresh sandbox (temp folder) with the `pcie-bridged-pairs` shape (4 nodes x 8 GPUs
in 4 NVLink-bridged pairs each: 16 pairs), applies atoll's CRDs and a ResourceClaimTemplate
asking for 2 GPUs with `matchAttribute: gpu.atoll.dev/island` (one pair). The same set of
`--jobs` Jobs of `--pods` pods (one pair each, `--run` long) is then submitted twice, all at
once, each time on an idle cluster:

1. without atoll: no queue label, kube-scheduler and its DRA allocator alone;
2. with atoll: the same Jobs labelled for a LocalQueue (quota large enough that only the
   devices limit admission), `atoll run` deciding which gangs start.

While each run lasts, pods, Jobs, Workloads and ResourceClaims are sampled (every ~0.5 s)
and the table reports: the most pods Pending at once for lack of devices (unschedulable), the
most gangs half-placed at once (some pods holding a pair, others waiting), how many gangs
were ever half-placed, the most pairs allocated at once, the most gangs admitted at once
(atoll) against the free pairs, and the wall time until every Job completed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.shapes import DRA_DRIVER, ISLAND_ATTRIBUTE, load_shape
from queue_manifests import queue_manifests

REPO = Path(__file__).resolve().parents[1]
SHAPE = REPO / "examples" / "clusters" / "pcie-bridged-pairs.yaml"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _list(*items: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _template(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "pair", "namespace": ns},
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


def _queue(ns: str) -> list[dict[str, Any]]:
    return queue_manifests(
        namespace=ns,
        flavor="pairs",
        cluster_queue="pairs",
        local_queue="q",
        quota={"cpu": 1000},
        flavor_spec={"nodeLabels": {"atoll.dev/node-group": "pcie"}},
        create_namespace=False,
    )


def _job(name: str, ns: str, pods: int, run: str, queued: bool) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {QUEUE_LABEL: "q"} if queued else {},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"atoll.dev/run-duration": run}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"atoll.dev/node-group": "pcie"},
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "pair"}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/atoll/trainer:1",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            },
        },
    }


@dataclass
class RunResult:
    mode: str
    jobs: int
    pods_per_job: int
    free_pairs: int
    max_pending_for_devices: int = 0
    """Most pods unschedulable at one sample (no node with a free pair for them)."""
    max_half_placed: int = 0
    """Most gangs with some pods holding a pair and others waiting, at one sample."""
    gangs_ever_half_placed: int = 0
    max_pairs_allocated: int = 0
    max_gangs_admitted: int | None = None
    """With atoll: most Workloads holding a reservation (not finished) at one sample."""
    admitted_pods_waited: int | None = None
    """With atoll: pods of admitted gangs ever seen unschedulable (over-promise)."""
    seconds: float = 0.0
    half_placed_names: list[str] = field(default_factory=list)


def _json(sb: Sandbox, *args: str) -> Any:
    return json.loads(sb.kubectl(*args, "-o", "json").stdout)


def _unschedulable(pod: dict[str, Any]) -> bool:
    if pod["spec"].get("nodeName"):
        return False
    return any(
        c["type"] == "PodScheduled"
        and c["status"] == "False"
        and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _holding(pod: dict[str, Any]) -> bool:
    phase = pod.get("status", {}).get("phase")
    return bool(pod["spec"].get("nodeName")) and phase not in ("Succeeded", "Failed")


def _admitted(wl: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in wl.get("status", {}).get("conditions", [])}
    return conds.get("QuotaReserved") == "True" and conds.get("Finished") != "True"


def _measure(
    sb: Sandbox, ns: str, *, jobs: int, pods: int, run: str, queued: bool, timeout: float
) -> RunResult:
    sb.kubectl("create", "-f", "-", input=_list(_namespace(ns), _template(ns)))
    if queued:
        sb.kubectl("apply", "--server-side", "-f", "-", input=_list(*_queue(ns)))
    names = [f"g{i:02d}" for i in range(jobs)]
    result = RunResult(
        mode="with atoll" if queued else "without atoll",
        jobs=jobs,
        pods_per_job=pods,
        free_pairs=16,
        max_gangs_admitted=0 if queued else None,
        admitted_pods_waited=0 if queued else None,
    )
    waited: set[str] = set()
    half: set[str] = set()
    start = time.monotonic()
    sb.kubectl("create", "-f", "-", input=_list(*[_job(n, ns, pods, run, queued) for n in names]))
    while time.monotonic() - start < timeout:
        pod_items = _json(sb, "get", "pods", "-n", ns)["items"]
        by_job: dict[str, list[dict[str, Any]]] = {}
        for p in pod_items:
            by_job.setdefault(p["metadata"].get("labels", {}).get("job-name", ""), []).append(p)
        pending = [p for p in pod_items if _unschedulable(p)]
        result.max_pending_for_devices = max(result.max_pending_for_devices, len(pending))
        now_half = [
            j
            for j, ps in by_job.items()
            if any(_holding(p) for p in ps) and any(_unschedulable(p) for p in ps)
        ]
        half.update(now_half)
        result.max_half_placed = max(result.max_half_placed, len(now_half))
        claims = _json(sb, "get", "resourceclaims", "-n", ns)["items"]
        pairs = sum(1 for c in claims if c.get("status", {}).get("allocation"))
        result.max_pairs_allocated = max(result.max_pairs_allocated, pairs)
        if queued:
            wls = _json(sb, "get", "workloads", "-n", ns)["items"]
            admitted = sum(1 for w in wls if _admitted(w))
            result.max_gangs_admitted = max(result.max_gangs_admitted or 0, admitted)
            waited.update(p["metadata"]["name"] for p in pending)
        done = _json(sb, "get", "jobs", "-n", ns)["items"]
        if sum(1 for j in done if j.get("status", {}).get("succeeded") == pods) == jobs:
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"{result.mode}: not every Job completed in {timeout:.0f}s")
    result.seconds = time.monotonic() - start
    result.gangs_ever_half_placed = len(half)
    result.half_placed_names = sorted(half)
    if queued:
        result.admitted_pods_waited = len(waited)
    # wait until the claims of this run are gone, so that the next run starts on idle devices
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = _json(sb, "get", "resourceclaims", "-n", ns)["items"]
        if not any(c.get("status", {}).get("allocation") for c in left):
            break
        time.sleep(0.5)
    return result


def run(jobs: int, pods: int, duration: str, timeout: float) -> list[RunResult]:
    with tempfile.TemporaryDirectory(prefix="atoll-bench-") as tmp:
        sb = Sandbox(root=Path(tmp) / "sb")
        sb.up(load_shape(SHAPE), log=lambda _m: None)
        try:
            sb.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            sb.kubectl("wait", "--for=condition=Established", "--all", "crd", "--timeout=60s")
            plain = _measure(
                sb, "plain", jobs=jobs, pods=pods, run=duration, queued=False, timeout=timeout
            )
            sb.start_operator()
            gated = _measure(
                sb, "atoll", jobs=jobs, pods=pods, run=duration, queued=True, timeout=timeout
            )
        finally:
            sb.down(log=lambda _m: None)
    return [plain, gated]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--pods", type=int, default=2, help="pods per Job (one pair each)")
    parser.add_argument("--run", default="20s", help="how long each pod runs")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.jobs, args.pods, args.run, args.timeout)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    table = Table(
        title=f"{args.jobs} Jobs x {args.pods} pods x 1 NVLink pair on pcie-bridged-pairs "
        "(16 pairs), submitted at once"
    )
    table.add_column("measure")
    for r in results:
        table.add_column(r.mode, justify="right")
    rows = [
        ("most pods Pending for devices at once", "max_pending_for_devices"),
        ("most gangs half-placed at once", "max_half_placed"),
        ("gangs ever half-placed", "gangs_ever_half_placed"),
        ("most pairs allocated at once", "max_pairs_allocated"),
        ("most gangs admitted at once", "max_gangs_admitted"),
        ("pods of admitted gangs that waited", "admitted_pods_waited"),
        ("seconds until all Jobs completed", "seconds"),
    ]
    for label, key in rows:
        cells = []
        for r in results:
            v = getattr(r, key)
            cells.append("-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v))
        table.add_row(label, *cells)
    Console().print(table)


if __name__ == "__main__":
    main()

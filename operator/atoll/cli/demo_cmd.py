"""`atoll demo`: the sandbox, atoll's CRDs and operator, and two GPU gangs on one queue: the
first is admitted whole, the second waits whole (no pod of it runs) until quota frees, then
runs. Prints where every pod ran and what `kubectl get workloads` said."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from atoll.sandbox import binaries
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.crds import apply_crds
from atoll.sandbox.processes import StartError
from atoll.sandbox.shapes import GPU_RESOURCE, ShapeError, load_shape

NAMESPACE = "atoll-demo"
TOPOLOGY_LABELS = ("topology.atoll.dev/block", "topology.atoll.dev/rack", "nvidia.com/gpu.clique")


def _queues(quota: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu-nodes"},
            "spec": {"nodeLabels": {"type": "kwok"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "demo-gpus"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": "gpu-nodes",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 1000},
                                    {"name": GPU_RESOURCE, "nominalQuota": quota},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": NAMESPACE},
            "spec": {"clusterQueue": "demo-gpus"},
        },
    ]


def _job(name: str, pods: int, gpus: int, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
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
                            "image": "registry.invalid/atoll/trainer:demo",
                            "resources": {
                                "requests": {"cpu": "1", GPU_RESOURCE: str(gpus)},
                                "limits": {GPU_RESOURCE: str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def _get(sandbox: Sandbox, *args: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(sandbox.kubectl(*args, "-o", "json").stdout)["items"]
    return items


def _nodes_table(sandbox: Sandbox) -> Table:
    table = Table(title="Nodes (fake, managed by KWOK)")
    for col in ("node", "GPUs", "product", "block", "rack", "clique"):
        table.add_column(col)
    for node in _get(sandbox, "get", "nodes"):
        labels = node["metadata"]["labels"]
        table.add_row(
            node["metadata"]["name"],
            node["status"]["allocatable"].get(GPU_RESOURCE, "0"),
            labels.get("nvidia.com/gpu.product", "-"),
            *(labels.get(key, "-") for key in TOPOLOGY_LABELS),
        )
    return table


def _pods_table(sandbox: Sandbox) -> Table:
    table = Table(title=f"Pods in {NAMESPACE}")
    for col in ("job", "pod", "node", "phase", "GPUs"):
        table.add_column(col)
    pods = _get(sandbox, "get", "pods", "-n", NAMESPACE)
    for pod in sorted(pods, key=lambda p: (p["metadata"]["name"], p["spec"].get("nodeName", ""))):
        limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
        table.add_row(
            pod["metadata"]["labels"].get("job-name", "-"),
            pod["metadata"]["name"],
            pod["spec"].get("nodeName", "-"),
            pod["status"].get("phase", "-"),
            limits.get(GPU_RESOURCE, "0"),
        )
    return table


def _workloads(sandbox: Sandbox) -> str:
    return sandbox.kubectl("get", "workloads", "-n", NAMESPACE).stdout.rstrip()


def _wait(sandbox: Sandbox, what: str, check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise StartError(f"demo: timed out waiting for {what}")


def _condition(sandbox: Sandbox, job: str, type_: str) -> dict[str, Any] | None:
    for wl in _get(sandbox, "get", "workloads", "-n", NAMESPACE):
        owners = [r["name"] for r in wl["metadata"].get("ownerReferences", [])]
        if job in owners:
            for c in wl.get("status", {}).get("conditions", []):
                if c["type"] == type_:
                    return dict(c)
    return None


def _story(sandbox: Sandbox, console: Console, quota: int) -> None:
    sandbox.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _queues(quota)}),
    )
    for name in ("train-a", "train-b"):
        sandbox.kubectl("delete", "job", name, "-n", NAMESPACE, "--ignore-not-found", "--wait")
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_job("train-a", 6, 8, "8s")))
    _wait(
        sandbox,
        "train-a admitted",
        lambda: (_condition(sandbox, "train-a", "Admitted") or {}).get("status") == "True",
    )
    sandbox.kubectl("create", "-f", "-", input=json.dumps(_job("train-b", 4, 8, "3s")))
    _wait(sandbox, "train-b evaluated", lambda: _condition(sandbox, "train-b", "QuotaReserved"))
    console.print(
        f"\nClusterQueue demo-gpus has {quota} GPUs. train-a (6 x 8 GPUs) is admitted "
        "whole; train-b (4 x 8 GPUs) waits whole - none of its pods exists yet:"
    )
    console.print(_workloads(sandbox))
    reason = _condition(sandbox, "train-b", "QuotaReserved") or {}
    console.print(f"train-b: {reason.get('reason')}: {reason.get('message')}\n")
    _wait(
        sandbox,
        "train-b to complete",
        lambda: any(
            j["status"].get("succeeded") == 4
            for j in _get(sandbox, "get", "jobs", "-n", NAMESPACE)
            if j["metadata"]["name"] == "train-b"
        ),
        timeout=180,
    )
    console.print("When train-a finished, train-b was admitted and ran:")
    console.print(_workloads(sandbox))


def _run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True)
    try:
        shape = load_shape(Path(args.shape))
        if binaries.missing():
            binaries.build(log=err.print)
        sandbox = Sandbox(root=Path(args.dir) if args.dir else None)
        sandbox.up(shape, log=err.print)
        try:
            names = apply_crds(sandbox.kubectl, Path(args.crds))
        except FileNotFoundError as e:
            raise StartError(str(e)) from None
        err.print(f"applied {len(names)} CRDs from {args.crds}")
        sandbox.start_operator("--set", "namespace=kube-system", timeout=90)
        err.print("atoll operator ready")
        console.print(_nodes_table(sandbox))
        _story(sandbox, console, args.quota)
    except (ShapeError, StartError, binaries.BuildError) as e:
        err.print(f"[red]atoll demo: {e}[/]")
        return 1
    except subprocess.CalledProcessError as e:
        err.print(f"[red]atoll demo: kubectl failed: {e.stderr or e}[/]")
        return 1
    console.print(_pods_table(sandbox))
    console.print(
        "The sandbox and the operator keep running. Explore with:\n"
        f'  eval "$({sys.argv[0]} sandbox env)" && kubectl get workloads,clusterqueues -A\n'
        "Stop everything with:  atoll sandbox down   (or make sandbox-down)"
    )
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="sandbox + CRDs + operator; one GPU gang admitted whole, another waiting whole",
    )
    parser.add_argument("--shape", default="examples/clusters/dgx-h100.yaml")
    parser.add_argument("--crds", default="crds", help="folder of CRDs to apply (default crds)")
    parser.add_argument("--dir", help="sandbox state folder (default as `atoll sandbox`)")
    parser.add_argument("--quota", type=int, default=64, help="GPUs of the demo queue (64)")
    parser.set_defaults(func=_run)

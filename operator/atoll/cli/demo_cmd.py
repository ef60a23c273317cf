"""`atoll demo`: bring up the sandbox, install atoll's CRDs, run a GPU Job, show the result."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from atoll.sandbox import binaries
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.processes import StartError
from atoll.sandbox.shapes import GPU_RESOURCE, ShapeError, load_shape

NAMESPACE = "atoll-demo"
TOPOLOGY_LABELS = ("topology.atoll.dev/block", "topology.atoll.dev/rack", "nvidia.com/gpu.clique")


def _job(pods: int, gpus_per_pod: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "demo-train", "namespace": NAMESPACE},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"annotations": {"atoll.dev/run-duration": "3s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/atoll/trainer:demo",
                            "resources": {"limits": {GPU_RESOURCE: str(gpus_per_pod)}},
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
    table = Table(title=f"Pods of Job {NAMESPACE}/demo-train")
    for col in ("pod", "node", "phase", "GPUs"):
        table.add_column(col)
    pods = _get(sandbox, "get", "pods", "-n", NAMESPACE, "-l", "job-name=demo-train")
    for pod in sorted(pods, key=lambda p: p["spec"].get("nodeName", "")):
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        table.add_row(
            pod["metadata"]["name"],
            pod["spec"].get("nodeName", "-"),
            pod["status"].get("phase", "-"),
            limits.get(GPU_RESOURCE, "0"),
        )
    return table


def _apply_crds(sandbox: Sandbox, crds: Path, console: Console) -> None:
    files = sorted(crds.glob("*.yaml")) if crds.is_dir() else []
    if not files:
        console.print(f"[yellow]no CRDs in {crds}: skipping[/]")
        return
    sandbox.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    console.print(f"applied {len(files)} CRDs from {crds}")


def _run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True)
    try:
        shape = load_shape(Path(args.shape))
        if binaries.missing():
            binaries.build(log=err.print)
        sandbox = Sandbox(root=Path(args.dir) if args.dir else None)
        sandbox.up(shape, log=err.print)
    except (ShapeError, StartError, binaries.BuildError) as e:
        err.print(f"[red]atoll demo: {e}[/]")
        return 1
    try:
        _apply_crds(sandbox, Path(args.crds), console)
        sandbox.kubectl("create", "namespace", NAMESPACE, check=False)
        sandbox.kubectl("delete", "job", "demo-train", "-n", NAMESPACE, "--ignore-not-found")
        job = _job(args.pods, args.gpus_per_pod)
        sandbox.kubectl("create", "-f", "-", input=yaml.safe_dump(job))
        console.print(
            f"created Job {NAMESPACE}/demo-train: {args.pods} pods x {args.gpus_per_pod} GPUs"
        )
        sandbox.kubectl(
            "wait",
            "--for=condition=Complete",
            "job/demo-train",
            "-n",
            NAMESPACE,
            "--timeout=120s",
            timeout=150,
        )
    except subprocess.CalledProcessError as e:
        err.print(f"[red]atoll demo: kubectl failed: {e.stderr or e}[/]")
        return 1
    console.print(_nodes_table(sandbox))
    console.print(_pods_table(sandbox))
    console.print(
        "The sandbox keeps running. Explore it with:\n"
        f'  eval "$({sys.argv[0]} sandbox env)" && kubectl get nodes,pods -A\n'
        "Stop it with:  atoll sandbox down   (or make sandbox-down)"
    )
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="sandbox up, CRDs applied, a GPU Job run on fake nodes, summary printed",
    )
    parser.add_argument("--shape", default="examples/clusters/dgx-h100.yaml")
    parser.add_argument("--crds", default="crds", help="folder of CRDs to apply (default crds)")
    parser.add_argument("--dir", help="sandbox state folder (default as `atoll sandbox`)")
    parser.add_argument("--pods", type=int, default=4, help="pods of the demo Job (default 4)")
    parser.add_argument("--gpus-per-pod", type=int, default=8, help="GPUs per pod (default 8)")
    parser.set_defaults(func=_run)

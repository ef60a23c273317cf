"""Admission latency of the operator on an idle sandbox, and its memory with many Workloads.

    python bench/operator_latency.py [--jobs 60] [--workloads 1000] [--restart] [--json]

Starts a fresh sandbox (temp folder), applies atoll's CRDs, runs `atoll run`, then:
1. creates `--jobs` labelled Jobs one at a time (each fits) through the API and measures,
   client side, the time from sending the create to seeing the Workload `Admitted=True`
   (polled every 2 ms): webhook, Workload creation, scheduling cycle and status write;
2. creates `--workloads` Workloads directly (a queue too small to admit them all) and reads
   the operator's resident memory once they are all in its cache, and its peak;
3. with `--restart`, starts the operator again (the old one stopped) and reads the new one's
   memory and peak once its initial listing has read every Workload back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from rich.console import Console
from rich.table import Table

from atoll.sandbox.cluster import Sandbox
from queue_manifests import create_all, queue_manifests

REPO = Path(__file__).resolve().parents[1]
NS = "bench"


def _queue(gpus: int) -> list[dict[str, Any]]:
    return queue_manifests(
        namespace=NS, flavor="rf", cluster_queue="cq", local_queue="q", quota={"cpu": gpus}
    )


def _job(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"j{i}",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {"atoll.dev/run-duration": "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                    ],
                },
            },
        },
    }


def _workload(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"w{i:05d}", "namespace": NS},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                            ]
                        }
                    },
                }
            ],
        },
    }


async def _latencies(kubeconfig: Path, jobs: int) -> list[float]:
    """Create each Job through the API and poll (every 2 ms) until its Workload is Admitted."""
    await config.load_kube_config(str(kubeconfig))
    out = []
    async with client.ApiClient() as api:
        batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
        for i in range(jobs):
            start = time.perf_counter()
            created = await batch.create_namespaced_job(NS, _job(i))
            selector = f"kueue.x-k8s.io/job-uid={created.metadata.uid}"
            while True:
                found = await custom.list_namespaced_custom_object(
                    "kueue.x-k8s.io", "v1beta2", NS, "workloads", label_selector=selector
                )
                conds = [
                    c for w in found["items"] for c in w.get("status", {}).get("conditions", [])
                ]
                if any(c["type"] == "Admitted" and c["status"] == "True" for c in conds):
                    break
                await asyncio.sleep(0.002)
            out.append(time.perf_counter() - start)
    return out


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (VmRSS) or at its peak (VmHWM), in MiB."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return float("nan")
    for line in status.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(jobs: int, workloads: int, restart: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="atoll-bench-") as tmp:
        sb = Sandbox(root=Path(tmp) / "sb")
        sb.up(log=lambda _m: None)
        try:
            sb.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            sb.kubectl("wait", "--for=condition=Established", "--all", "crd", "--timeout=60s")
            pid = sb.start_operator().pid
            sb.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _queue(1000)}),
            )
            latencies = asyncio.run(_latencies(sb.kubeconfig, jobs))
            idle_rss = _rss_mib(pid)
            sb.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _queue(10)[2:3]}),
            )
            create_all(sb.kubectl, (_workload(i) for i in range(workloads)))
            time.sleep(10)  # let the operator see and cycle over all of them
            loaded_rss = _rss_mib(pid)
            peak_rss = _rss_mib(pid, "VmHWM")
            if math.isnan(loaded_rss):  # the operator is gone
                log = Path(tmp) / "sb" / "logs" / "atoll-operator.log"
                print(log.read_text()[-3000:], file=sys.stderr)
            restarted: dict[str, Any] = {}
            if restart:
                # a new operator (the old one stopped): /readyz answers once its initial
                # listing has read every Workload back
                pid = sb.start_operator(timeout=600).pid
                time.sleep(10)
                restarted = {
                    "restart_rss_mib": _rss_mib(pid),
                    "restart_peak_rss_mib": _rss_mib(pid, "VmHWM"),
                }
        finally:
            sb.down(log=lambda _m: None)
    latencies.sort()
    return {
        "jobs": jobs,
        "latency_p50_ms": statistics.median(latencies) * 1000,
        "latency_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "latency_max_ms": latencies[-1] * 1000,
        "rss_idle_mib": idle_rss,
        "workloads": workloads,
        "rss_with_workloads_mib": loaded_rss,
        "peak_rss_mib": peak_rss,
        **restarted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument(
        "--restart",
        action="store_true",
        help="then restart the operator and read its memory after the initial listing",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.jobs, args.workloads, args.restart)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title="atoll operator on an idle sandbox")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:.1f}" if isinstance(value, float) else str(value))
    Console().print(table)


if __name__ == "__main__":
    main()

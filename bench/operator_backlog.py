"""The live operator on a congested backlog: CPU and scheduling cycles per admission with
thousands of Jobs queued on a full cluster (the live counterpart of `atoll simulate
examples/scenarios/backlog-1k.yaml`).

    python bench/operator_backlog.py [--jobs 5000] [--window 90] [--run 20s] [--json]
        [--profile FILE]

A fresh sandbox with the scenario's cluster (8 KWOK nodes x 8 H100) and queue objects (one
BestEffortFIFO ClusterQueue of 64 GPUs), `atoll run` on it (qps/burst 300/500), then:
1. 64 one-GPU Jobs that run for an hour fill the cluster;
2. `--jobs` one-GPU Jobs (each runs `--run` once admitted) are queued behind them; the bench
   waits until the operator has created all their Workloads;
3. the 64 long Jobs are deleted, and for `--window` seconds every completion admits the next
   Jobs. Over the window: the operator's CPU seconds, the admissions
   (`kueue_admitted_workloads_total`) and the scheduling cycles
   (`kueue_admission_attempts_total`), hence CPU and cycles per admission; and the
   operator's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path[:0] = [str(Path(__file__).resolve().parent / "kueue_baseline")]

from controllers import (  # noqa: E402
    cpu_seconds,
    peak_rss_mib,
    profile_top,
    start_py_spy,
    stop_py_spy,
)

from atoll.sandbox.cluster import Sandbox  # noqa: E402
from atoll.sandbox.processes import free_port  # noqa: E402
from atoll.sandbox.shapes import ClusterShape  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "examples" / "scenarios" / "backlog-1k.yaml"
NS = "research"
CHUNK = 250


def _scenario() -> tuple[ClusterShape, list[dict[str, Any]]]:
    """The scenario's cluster shape and its queue objects (its Jobs are not used)."""
    docs = [d for d in yaml.safe_load_all(SCENARIO.read_text()) if d]
    shape = ClusterShape.model_validate(docs[0])
    queues = [d for d in docs[1:] if d["kind"] in ("ResourceFlavor", "ClusterQueue", "LocalQueue")]
    return shape, queues


def _job(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": NS},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "metadata": {"annotations": {"atoll.dev/run-duration": run}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/atoll/sleep:1",
                            "resources": {
                                "requests": {"cpu": "8", "nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def _create(sb: Sandbox, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), CHUNK):
        body = {"apiVersion": "v1", "kind": "List", "items": items[start : start + CHUNK]}
        done = sb.kubectl("create", "-f", "-", input=json.dumps(body), timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl create: {done.stderr.strip()[-2000:]}")


def _metric(port: int, name: str) -> float:
    """The sum of every sample of the metric `name` on the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


def _wait(what: str, check: Any, timeout: float) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)
    return time.monotonic() - start


def run(jobs: int, window: float, run_for: str, profile: Path | None = None) -> dict[str, Any]:
    shape, queues = _scenario()
    gpus = shape.gpu_count()
    with tempfile.TemporaryDirectory(prefix="atoll-bench-backlog-") as tmp:
        sb = Sandbox(root=Path(tmp) / "sb")
        sb.up(shape, log=lambda _m: None)
        try:
            sb.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            sb.kubectl("wait", "--for=condition=Established", "--all", "crd", "--timeout=60s")
            sb.kubectl("create", "namespace", NS)
            port = free_port()
            pid = sb.start_operator(
                "--metrics-bind-address",
                f"127.0.0.1:{port}",
                "--set",
                "clientConnection.qps=300",
                "--set",
                "clientConnection.burst=500",
            ).pid
            sb.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": queues}),
            )

            def admitted() -> float:
                return _metric(port, "kueue_admitted_workloads_total")

            def workloads() -> float:
                return _metric(port, "kueue_pending_workloads") + admitted()

            spy = start_py_spy(pid, profile) if profile is not None else None
            _create(sb, [_job(f"long-{i:02d}", "1h") for i in range(gpus)])
            _wait(f"{gpus} long Jobs admitted", lambda: admitted() >= gpus, 300)
            cpu_before_queue = cpu_seconds(pid)
            t0 = time.monotonic()
            _create(sb, [_job(f"j{i:05d}", run_for) for i in range(jobs)])
            _wait(f"{jobs} Workloads created", lambda: workloads() >= gpus + jobs, 1200)
            queued_s = time.monotonic() - t0
            queue_cpu = cpu_seconds(pid) - cpu_before_queue
            time.sleep(5)  # the last Workloads are parked
            cpu0, admitted0 = cpu_seconds(pid), admitted()
            cycles0 = _metric(port, "kueue_admission_attempts_total")
            names = [f"job/long-{i:02d}" for i in range(gpus)]
            sb.kubectl("delete", "-n", NS, "--wait=false", *names)
            t1 = time.monotonic()
            time.sleep(window)
            elapsed = time.monotonic() - t1
            cpu = cpu_seconds(pid) - cpu0
            n = admitted() - admitted0
            cycles = _metric(port, "kueue_admission_attempts_total") - cycles0
            peak = peak_rss_mib(pid)
            stop_py_spy(spy)
        finally:
            sb.down(log=lambda _m: None)
    return {
        "queued_jobs": jobs,
        "gpus": gpus,
        "queueing_s": queued_s,
        "queueing_cpu_s": queue_cpu,
        "queueing_cpu_ms_per_job": 1000 * queue_cpu / max(1, jobs),
        "window_s": elapsed,
        "admissions": n,
        "cpu_s": cpu,
        "cpu_ms_per_admission": 1000 * cpu / max(1.0, n),
        "cycles": cycles,
        "cycles_per_admission": cycles / max(1.0, n),
        "peak_rss_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="Jobs queued behind a full cluster")
    parser.add_argument("--window", type=float, default=90, help="seconds measured")
    parser.add_argument("--run", default="20s", help="run time of each queued Job once admitted")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile", type=Path, metavar="FILE", help="sample the operator with py-spy (raw stacks)"
    )
    args = parser.parse_args()
    result = run(args.jobs, args.window, args.run, args.profile)
    if args.profile is not None:
        top = profile_top(args.profile)
        result["profile_top_self"] = top["self"][:12]
        result["profile_top_total"] = top["total"][:25]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title=f"atoll operator, {args.jobs:,} Jobs queued on a full cluster")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if isinstance(value, list):
            continue
        table.add_row(key, f"{value:,.2f}" if isinstance(value, float) else f"{value:,}")
    Console().print(table)
    for key in ("profile_top_self", "profile_top_total"):
        for frame, pct in result.get(key, []):
            print(f"{key[12:]:>5} {pct:5.1f}% {frame}")


if __name__ == "__main__":
    main()

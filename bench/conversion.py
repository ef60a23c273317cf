"""What serving Kueue's v1beta1 costs: the conversion webhook's CPU per queue object, and on a
live sandbox, which changes the API server sends through it.

    python bench/conversion.py [--queues 1000 10000] [--repeat 3] [--live N] [--json]

Offline (always): one ConversionReview of N ClusterQueues and one of N LocalQueues (with
status), converted down to v1beta1 and back up, as the webhook answers it
(`atoll.kube.admission.convert_review`, JSON in and out): CPU seconds, median of `--repeat`.

With `--live N`: a fresh sandbox (temp folder) with atoll's CRDs and operator; N pending
Workloads are created (their queue is too small), then every ClusterQueue is read as v1beta1.
Reported: the conversions the API server made, per CRD (its
`apiserver_crd_conversion_webhook_duration_seconds_count`), the operator's CPU seconds while
the Workloads were created and got their pending statuses, and the v1beta1 read's wall time.
Workloads are served in v1beta2 only (`atoll.api.v1beta1`), so none of their changes should be
converted: the API server fills a served version's watch cache through the webhook.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from atoll.kube.admission import convert_review
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.crds import apply_crds
from queue_manifests import create_all, queue_manifests

REPO = Path(__file__).resolve().parents[1]
NS = "bench"
V1BETA2 = "kueue.x-k8s.io/v1beta2"
V1BETA1 = "kueue.x-k8s.io/v1beta1"
GPU = "nvidia.com/gpu"


def _cluster_queue(i: int) -> dict[str, Any]:
    usage = [{"name": "gpu", "resources": [{"name": GPU, "total": "16"}]}]
    return {
        "apiVersion": V1BETA2,
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{i:05d}", "uid": f"u-{i}", "resourceVersion": "1"},
        "spec": {
            "cohortName": f"cohort-{i % 10}",
            "namespaceSelector": {},
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch"},
            "admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}]},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", GPU],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 512},
                                {"name": GPU, "nominalQuota": 64, "borrowingLimit": 32},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 2, "flavorsUsage": usage},
    }


def _local_queue(i: int) -> dict[str, Any]:
    usage = [{"name": "gpu", "resources": [{"name": GPU, "total": "16"}]}]
    return {
        "apiVersion": V1BETA2,
        "kind": "LocalQueue",
        "metadata": {"name": f"lq-{i:05d}", "namespace": "team", "uid": f"u-{i}"},
        "spec": {"clusterQueue": f"cq-{i:05d}"},
        "status": {"pendingWorkloads": 3, "flavorsUsage": usage, "flavorsReservation": usage},
    }


def _review(objects: list[dict[str, Any]], desired: str) -> bytes:
    request = {"uid": "bench", "desiredAPIVersion": desired, "objects": objects}
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}
    return json.dumps({**body, "request": request}).encode()


def _timed(body: bytes, repeat: int) -> tuple[float, list[dict[str, Any]]]:
    times, converted = [], []
    for _ in range(repeat):
        t = time.process_time()
        answer = convert_review(body)
        times.append(time.process_time() - t)
        converted = answer["response"]["convertedObjects"]
    return statistics.median(times), converted


def offline(n: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for kind, make in (("ClusterQueue", _cluster_queue), ("LocalQueue", _local_queue)):
        objects = [make(i) for i in range(n)]
        down, old = _timed(_review(objects, V1BETA1), repeat)
        up, back = _timed(_review(old, V1BETA2), repeat)
        if back != objects:
            raise SystemExit(f"the round trip changed a {kind}")
        rows.append(
            {
                "kind": kind,
                "objects": n,
                "down_cpu_s": down,
                "up_cpu_s": up,
                "down_us_each": down / n * 1e6,
                "up_us_each": up / n * 1e6,
            }
        )
    return rows


def _workload(i: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", GPU: "8"}}}
    return {
        "apiVersion": V1BETA2,
        "kind": "Workload",
        "metadata": {"name": f"w{i:05d}", "namespace": NS},
        "spec": {
            "queueName": "q",
            "podSets": [
                {"name": "main", "count": 8, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in ticks of 1/100 s


def _conversions(sb: Sandbox) -> dict[str, int]:
    metrics = sb.kubectl("get", "--raw", "/metrics").stdout
    found: dict[str, int] = {}
    pattern = (
        r'^apiserver_crd_conversion_webhook_duration_seconds_count\{crd_name="([^"]+)".* (\d+)$'
    )
    for line in metrics.splitlines():
        m = re.match(pattern, line)
        if m:
            name = m.group(1).split(".")[0]
            found[name] = found.get(name, 0) + int(m.group(2))
    return found


def live(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="atoll-bench-") as tmp:
        sb = Sandbox(root=Path(tmp) / "sb")
        sb.up(log=lambda _m: None)
        try:
            apply_crds(sb.kubectl, REPO / "crds")
            pid = sb.start_operator().pid
            queue = queue_manifests(
                namespace=NS,
                flavor="gpu",
                cluster_queue="cq",
                local_queue="q",
                quota={"cpu": 8, GPU: 8},
            )
            sb.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": queue}),
            )
            time.sleep(3)
            before, cpu = _conversions(sb), _cpu_s(pid)
            create_all(sb.kubectl, (_workload(i) for i in range(n)))
            time.sleep(8)  # every pending status written, the queue statuses too
            cpu = _cpu_s(pid) - cpu
            after = _conversions(sb)
            t = time.perf_counter()
            out = sb.kubectl("get", "clusterqueues.v1beta1.kueue.x-k8s.io", "-o", "json")
            read_s = time.perf_counter() - t
            if json.loads(out.stdout)["items"][0]["apiVersion"] != V1BETA1:
                raise SystemExit("the ClusterQueue was not read as v1beta1")
            return {
                "workloads": n,
                "operator_cpu_s": cpu,
                "conversions": {k: after.get(k, 0) - before.get(k, 0) for k in after},
                "v1beta1_cluster_queue_read_s": read_s,
            }
        finally:
            sb.down(log=lambda _m: None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--live", type=int, metavar="N", help="also create N Workloads live")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    rows = [row for n in args.queues for row in offline(n, args.repeat)]
    result: dict[str, Any] = {"offline": rows}
    if args.live:
        result["live"] = live(args.live)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(title="the v1beta1 conversion webhook, one ConversionReview (CPU, median)")
    for column in ("kind", "objects", "down to v1beta1", "up to v1beta2", "per object"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r["kind"],
            f"{r['objects']:,}",
            f"{r['down_cpu_s']:.3f} s",
            f"{r['up_cpu_s']:.3f} s",
            f"{r['down_us_each']:.0f} / {r['up_us_each']:.0f} µs",
        )
    console = Console()
    console.print(table)
    if "live" in result:
        lv = result["live"]
        console.print(
            f"live, {lv['workloads']:,} pending Workloads: operator CPU "
            f"{lv['operator_cpu_s']:.2f} s; conversions by CRD {lv['conversions']}; "
            f"every ClusterQueue read as v1beta1 in {lv['v1beta1_cluster_queue_read_s']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

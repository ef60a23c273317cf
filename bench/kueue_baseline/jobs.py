"""The user's view, side by side: labelled batch/v1 Jobs of 8 pods on the dgx-h100 shape, under
Kueue and under atoll, each on a fresh sandbox, the same client budget and the same Jobs.

    python bench/kueue_baseline/jobs.py [--jobs 24] [--pods 8] [--gpus-per-pod 8]
        [--interval 2] [--run 10] [--budget 50/100] [--only atoll|kueue]
        [--kind job|jobset|both] [--background-load N] [--profile] [--json] [--timeout 900]

For each controller: sandbox up with the dgx-h100 nodes (16 × 8 GPUs on KWOK), the
controller with its Job webhook (Kueue's from its module's webhook manifests, pointed at
127.0.0.1; atoll's in url mode), one ResourceFlavor, one ClusterQueue with the cluster's GPUs
as quota and one LocalQueue. Then `--jobs` Jobs (each `--pods` pods of `--gpus-per-pod` GPUs
that run `--run` seconds on KWOK) are created one every `--interval` seconds, more than the
cluster holds at once, so later Jobs queue. A pod watch records, client side, when each pod is
first seen Running and Succeeded, a Job watch when each Job is Complete. Reported per
controller: Job created → all its pods Running (p50, p99, max), the handoff (a gang's pods all
Succeeded → the next queued Job's pods all Running: the part of the wait the controller adds,
with the Job controller and the scheduler; p50, p99) and, of that, pods Succeeded → Job
Complete (the Job controller's part, p50), Jobs done, the controller's Workload writes per Job
(the API server's request counters: only the controller writes Workloads; a 409 counts too),
the controller's Events per Job (by reason under the table), controller CPU seconds per Job
and peak RSS, and the atoll/Kueue ratios; for atoll also its own requests per Job by verb,
resource and result.

`--kind jobset` submits each gang as a JobSet of one replicated job (1 replica, the same pods)
instead, to atoll only, on a sandbox that also runs the JobSet controller (built once into the
binary cache: `atoll sandbox build --with jobset`), atoll enabling the JobSet framework;
`--kind both` runs atoll once per kind and reports its CPU per admission for each, side by
side (every Job or JobSet is one Workload, one admission).
Nothing here is asserted: the numbers go in notes, with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(REPO / "operator")]

from controllers import (  # noqa: E402
    Atoll,
    Budget,
    Controller,
    Kueue,
    kueue_module_dir,
    profile_top,
    start_py_spy,
    stop_py_spy,
    teardown,
)
from kubeclient import ApiError, KubeClient  # noqa: E402
from load import BackgroundLoad, count  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from atoll.sandbox import integrations, shapes  # noqa: E402
from atoll.sandbox.cluster import Sandbox  # noqa: E402
from atoll.sandbox.kwok import RUN_DURATION_ANNOTATION  # noqa: E402
from atoll.sandbox.processes import free_port  # noqa: E402
from queue_manifests import queue_manifests  # noqa: E402
from run import apiserver_writes, print_profile  # noqa: E402

console = Console(stderr=True)
NS = "bench-jobs"
SHAPE = REPO / "examples" / "clusters" / "dgx-h100.yaml"
GPU = shapes.GPU_RESOURCE
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_FRAMEWORKS = 'integrations.frameworks=["batch/job", "jobset.x-k8s.io/jobset"]'


class AtollWithWebhook(Atoll):
    """`atoll run` with its webhooks registered in url mode on 127.0.0.1 (and the JobSet
    framework enabled when `jobsets`)."""

    jobsets = False

    def argv(self) -> list[str]:
        argv = super().argv()
        i = argv.index("--webhook")
        argv[i + 1] = "url"
        extra = ["--set", JOBSET_FRAMEWORKS] if self.jobsets else []
        return [*argv, "--webhook-bind-address", f"127.0.0.1:{free_port()}", *extra]


class KueueWithJobs(Kueue):
    """Kueue's manager with its batch/v1 Job webhooks registered. The webhook configurations
    are read from the pinned module's manifests (only the Job entries), their service
    reference replaced by a URL on 127.0.0.1 and the sandbox CA bundle of our serving PKI."""

    def start(self, timeout: float = 120) -> None:
        super().start(timeout)
        manifests = kueue_module_dir(self.version) / "config/components/webhook/manifests.yaml"
        ca = base64.b64encode(self.certs.ca_cert.read_bytes()).decode()
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            hooks = [
                h
                for h in doc.get("webhooks", [])
                if h["clientConfig"]["service"]["path"].endswith("-batch-v1-job")
            ]
            for h in hooks:
                path = h["clientConfig"]["service"]["path"]
                h["clientConfig"] = {
                    "url": f"https://127.0.0.1:{self.webhook_port}{path}",
                    "caBundle": ca,
                }
            doc["metadata"] = {"name": f"kueue-bench-{doc['kind'].lower()}"}
            doc["webhooks"] = hooks
            self.sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def queues(gpus: int) -> list[dict[str, Any]]:
    return queue_manifests(
        namespace=NS,
        flavor="h100",
        cluster_queue="gpus",
        local_queue="team",
        quota={"cpu": 100_000, "memory": "100Ti", GPU: gpus},
    )


def job(name: str, args: argparse.Namespace) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "64Gi", GPU: str(args.gpus_per_pod)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
        "spec": {
            "parallelism": args.pods,
            "completions": args.pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {RUN_DURATION_ANNOTATION: f"{args.run}s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "bench",
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                },
            },
        },
    }


def jobset(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same gang as `job` as a JobSet of one replicated job of one replica."""
    spec = job(name, args)["spec"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": spec}}]},
    }


async def follow(client: KubeClient, path: str, see: Callable[[dict[str, Any]], None]) -> None:
    """Every object of the collection `path`, as listed and then on each change, to `see`
    (re-listed after 410 Gone); runs until cancelled."""
    listing = await client.request("GET", path)
    for obj in listing.get("items") or []:
        see(obj)
    rv = listing.get("metadata", {}).get("resourceVersion")
    while True:
        try:
            async for ev in client.watch(path, rv):
                obj = ev.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    see(obj)
        except ApiError as e:
            if e.status != 410:
                raise
            listing = await client.request("GET", path)
            for obj in listing.get("items") or []:
                see(obj)
            rv = listing["metadata"]["resourceVersion"]


class PodWatch:
    """When each pod was first seen Running and when Succeeded, by gang (Job or JobSet)
    name, the value of `owner_label`; and when each Job was first seen Complete (client-side
    monotonic times)."""

    def __init__(self, client: KubeClient, owner_label: str = JOB_NAME_LABEL) -> None:
        self.client = client
        self.owner_label = owner_label
        self.running: dict[str, dict[str, float]] = {}
        self.ended: dict[str, dict[str, float]] = {}
        self.complete: dict[str, float] = {}

    def _see(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        job_name = (meta.get("labels") or {}).get(self.owner_label)
        phase = (pod.get("status") or {}).get("phase")
        if job_name is None:
            return
        now = time.monotonic()
        if phase in ("Running", "Succeeded"):
            self.running.setdefault(job_name, {}).setdefault(meta["name"], now)
        if phase == "Succeeded":
            self.ended.setdefault(job_name, {}).setdefault(meta["name"], now)

    def _see_job(self, job: dict[str, Any]) -> None:
        name = (job.get("metadata") or {}).get("name")
        conds = (job.get("status") or {}).get("conditions") or []
        if name and any(c.get("type") == "Complete" and c.get("status") == "True" for c in conds):
            self.complete.setdefault(name, time.monotonic())

    async def run(self) -> None:
        await asyncio.gather(
            follow(self.client, f"/api/v1/namespaces/{NS}/pods", self._see),
            follow(self.client, f"/apis/batch/v1/namespaces/{NS}/jobs", self._see_job),
        )


def handoffs(
    created: dict[str, float], started: dict[str, float], ended: dict[str, float]
) -> list[float]:
    """For each gang that was still queued when the last gang before its start ended (all
    its pods Succeeded): the seconds from that end to this gang's pods all Running, the
    part of the wait the controller (with the Job controller and the scheduler) adds."""
    gaps = []
    for name, start in started.items():
        before = [t for other, t in ended.items() if other != name and t <= start]
        if before and created[name] < max(before):
            gaps.append(start - max(before))
    return gaps


async def drive(
    controller: Controller, sandbox: Sandbox, args: argparse.Namespace, gpus: int
) -> dict[str, Any]:
    async with KubeClient.from_kubeconfig(sandbox.kubeconfig) as client:
        for obj in queues(gpus):
            await client.request("POST", _collection(obj), obj)
        jobsets = args.kind == "jobset"
        watch = PodWatch(client, JOBSET_NAME_LABEL if jobsets else JOB_NAME_LABEL)
        watcher = asyncio.create_task(watch.run())
        await asyncio.sleep(1.0)  # the queues are seen and the watch is established
        cpu0 = controller.sample()["cpu_total_s"]
        created: dict[str, float] = {}
        start = time.monotonic()
        timed_out = False
        try:
            for i in range(args.jobs):
                name = f"train-{i:03d}"
                created[name] = time.monotonic()
                if jobsets:
                    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
                    await client.request("POST", path, jobset(name, args))
                else:
                    await client.request(
                        "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job(name, args)
                    )
                await asyncio.sleep(args.interval)
            while len([j for j in created if len(watch.ended.get(j, ())) >= args.pods]) < len(
                created
            ):
                if watcher.done():
                    watcher.result()
                if not controller.alive():
                    raise RuntimeError(f"{controller.name} exited:\n{controller.tail()}")
                if time.monotonic() - start > args.timeout:
                    timed_out = True
                    break
                await asyncio.sleep(0.2)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        sample = controller.sample()
        listing = await client.request(
            "GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
        )
        writes = await apiserver_writes(client)
        events = await controller_events(client)
    started = {
        name: max(seen.values())
        for name in created
        if len(seen := watch.running.get(name, {})) >= args.pods
    }
    waits = [started[name] - created[name] for name in started]
    ended = {
        name: max(seen.values())
        for name in created
        if len(seen := watch.ended.get(name, {})) >= args.pods
    }
    gaps = handoffs(created, started, ended)
    completing = [watch.complete[n] - ended[n] for n in ended if n in watch.complete]
    done = len(ended)
    return {
        "jobs": len(created),
        # each Job's Workload: proof that the controller's webhook and Job reconciler ran
        "workloads": len(listing.get("items") or []),
        "started": len(waits),
        "done": done,
        "timed_out": timed_out,
        "wall_s": time.monotonic() - start,
        "start_p50_s": _pct(waits, 50),
        "start_p99_s": _pct(waits, 99),
        "start_max_s": max(waits, default=math.nan),
        "handoff_p50_s": _pct(gaps, 50),
        "handoff_p99_s": _pct(gaps, 99),
        "handoffs": len(gaps),
        # the Job controller's part of a handoff: pods all Succeeded → the Job Complete
        "complete_p50_s": _pct(completing, 50),
        # only the controller writes Workloads (creates, status, finalizers, deletes)
        "workload_writes": {k: v for k, v in writes.items() if " workloads" in k},
        "workload_writes_per_job": sum(v for k, v in writes.items() if " workloads" in k)
        / max(1, len(created)),
        # the controller's Events by reason (occurrences: an Event repeated counts each time)
        "events": events,
        "events_per_job": sum(events.values()) / max(1, len(created)),
        "cpu_s": sample["cpu_total_s"] - cpu0,
        "cpu_per_job_ms": 1000 * (sample["cpu_total_s"] - cpu0) / max(1, len(created)),
        "peak_rss_mib": sample["peak_rss_mib"],
    }


async def controller_events(client: KubeClient) -> dict[str, int]:
    """The controller's Events in the namespace by reason, counting each occurrence (the
    `count` of an Event its recorder repeated): those whose source names Kueue (Kueue's
    recorders, and atoll's, which posts as `kueue-admission`)."""
    listing = await client.request("GET", f"/api/v1/namespaces/{NS}/events")
    out: dict[str, int] = {}
    for ev in listing.get("items") or []:
        source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or ""
        if "kueue" in source:
            out[ev.get("reason", "")] = out.get(ev.get("reason", ""), 0) + (ev.get("count") or 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _collection(obj: dict[str, Any]) -> str:
    kind, ns = obj["kind"], obj["metadata"].get("namespace")
    if kind == "Namespace":
        return "/api/v1/namespaces"
    plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues"}.get(kind)
    if plural is not None:
        return f"/apis/kueue.x-k8s.io/v1beta2/{plural}"
    return f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues"


def _pct(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    if len(values) == 1:
        return values[0]
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]
        if p < 100
        else max(values)
    )


def run_one(system: str, args: argparse.Namespace, budget: Budget, base: Path) -> dict[str, Any]:
    workdir = base / f"{system}-{args.kind}"
    workdir.mkdir(parents=True)
    sandbox = Sandbox(root=Path(tempfile.mkdtemp(prefix=f"atoll-jobs-{system}-")) / "sb")
    shape = shapes.load_shape(SHAPE)
    controller: Controller | None = None
    spy = None
    result: dict[str, Any] = {"system": system, "budget": str(budget), "workdir": str(workdir)}
    try:
        console.print(f"[bold]{system}[/]: fresh sandbox with {shape.name} …")
        sandbox.up(shape, log=lambda m: console.print(f"  [dim]{m}[/]"))
        if args.kind == "jobset":
            integrations.start(
                sandbox,
                integrations.INTEGRATIONS["jobset"],
                log=lambda m: console.print(f"  [dim]{m}[/]"),
            )
        if system == "kueue":
            controller = KueueWithJobs(sandbox, budget, workdir)
            result["version"] = controller.version
        else:
            controller = AtollWithWebhook(sandbox, budget, workdir)
            controller.jobsets = args.kind == "jobset"
        controller.start()
        if args.profile and system == "atoll":
            spy = start_py_spy(controller.pid, workdir / "atoll.pyspy.txt", rate=args.profile_rate)
        with BackgroundLoad(args.background_load):
            result.update(asyncio.run(drive(controller, sandbox, args, shape.gpu_count())))
        if isinstance(controller, Atoll):
            result["api_requests"] = controller.scrape().get("requests", {})
        if spy is not None:
            stop_py_spy(spy)
            result["profile"] = profile_top(workdir / "atoll.pyspy.txt")
        console.print(f"  done: {result['done']}/{result['jobs']} Jobs in {result['wall_s']:.0f}s")
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        console.print(f"[red]{system} failed:[/] {result['error']}")
        traceback.print_exc()
    finally:
        teardown(sandbox, controller, spy)
    return result


ROWS = (
    ("Jobs created", "jobs", False),
    ("Workloads (one per Job when the controller manages them)", "workloads", False),
    ("Jobs with all pods Running", "started", False),
    ("Jobs done", "done", False),
    ("controller Workload writes per Job", "workload_writes_per_job", True),
    ("controller Events per Job", "events_per_job", True),
    ("Job created → all pods Running p50 (s)", "start_p50_s", True),
    ("Job created → all pods Running p99 (s)", "start_p99_s", True),
    ("Job created → all pods Running max (s)", "start_max_s", True),
    ("handoff: a gang's pods Succeeded → next Job's pods Running p50 (s)", "handoff_p50_s", True),
    ("handoff p99 (s)", "handoff_p99_s", True),
    ("Job's pods all Succeeded → Job Complete p50 (s)", "complete_p50_s", True),
    ("controller CPU per Job (ms)", "cpu_per_job_ms", True),
    ("controller peak RSS (MiB)", "peak_rss_mib", True),
)


def table(args: argparse.Namespace, budget: Budget, results: dict[str, dict[str, Any]]) -> Table:
    kueue, atoll = results.get("kueue", {}), results.get("atoll", {})
    t = Table(
        title=f"{args.jobs} Jobs × {args.pods} pods × {args.gpus_per_pod} GPUs on dgx-h100 "
        f"(one every {args.interval}s, {args.run}s each), budget {budget}, "
        f"background load {args.background_load}"
    )
    t.add_column("metric")
    t.add_column(f"Kueue {kueue.get('version', '')}".strip(), justify="right")
    t.add_column("atoll", justify="right")
    t.add_column("atoll/Kueue", justify="right")
    for label, key, lower in ROWS:
        k, a = kueue.get(key, math.nan), atoll.get(key, math.nan)
        ratio = a / k if k and not math.isnan(k) and not math.isnan(a) else math.nan
        good = ratio <= 1.0 if lower else ratio >= 1.0
        ratio_s = "—" if math.isnan(ratio) else f"[{'green' if good else 'red'}]{ratio:.2f}×[/]"
        t.add_row(label, _fmt(k), _fmt(a), ratio_s)
    for system, res in results.items():
        if "error" in res:
            t.add_row(f"[red]{system} error[/]", res["error"][:60], "", "")
    return t


def kinds_table(
    args: argparse.Namespace, budget: Budget, by_kind: dict[str, dict[str, Any]]
) -> Table:
    """atoll's numbers per kind submitted (`--kind both`): Jobs vs JobSets of the same pods."""
    t = Table(
        title=f"atoll: {args.jobs} gangs × {args.pods} pods × {args.gpus_per_pod} GPUs on "
        f"dgx-h100 as Jobs vs JobSets (one every {args.interval}s, {args.run}s each), "
        f"budget {budget}"
    )
    t.add_column("metric")
    for kind in by_kind:
        t.add_column("Jobs" if kind == "job" else "JobSets", justify="right")
    if len(by_kind) == 2:
        t.add_column("JobSet/Job", justify="right")
    rows = [
        (
            "atoll CPU per admission (ms)"
            if key == "cpu_per_job_ms"
            else label.replace("Job", "gang"),
            key,
        )
        for label, key, _ in ROWS
    ]
    for label, key in rows:
        values = [res.get(key, math.nan) for res in by_kind.values()]
        cells = [_fmt(v) for v in values]
        if len(values) == 2:
            job_v, set_v = values
            ok = job_v and not math.isnan(job_v) and not math.isnan(set_v)
            cells.append(f"{set_v / job_v:.2f}×" if ok else "—")
        t.add_row(label, *cells)
    for kind, res in by_kind.items():
        if "error" in res:
            t.add_row(f"[red]{kind} error[/]", res["error"][:60])
    return t


def print_requests(res: dict[str, Any], out: Console) -> None:
    """atoll's own requests (`atoll_api_requests_total`, its writer's: the watches' lists
    are not in it) per Job, by verb, resource and result, most first."""
    jobs = max(1, res.get("jobs", 0))
    rows = sorted(res.get("api_requests", {}).items(), key=lambda kv: -kv[1])
    total = sum(n for _, n in rows)
    out.print(f"atoll API requests per Job: {total / jobs:.2f} in all")
    for labels, n in rows:
        out.print(f"  {n / jobs:6.2f}  {labels}")


def _fmt(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=24, help="Jobs created (default 24)")
    p.add_argument("--pods", type=int, default=8, help="pods per Job (default 8)")
    p.add_argument("--gpus-per-pod", type=int, default=8, help="GPUs per pod (default 8)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between creates")
    p.add_argument("--run", type=int, default=10, help="seconds each pod runs on KWOK")
    p.add_argument("--budget", default="50/100", help="client qps/burst for both (50/100)")
    p.add_argument("--only", choices=("atoll", "kueue"))
    p.add_argument(
        "--kind",
        choices=("job", "jobset", "both"),
        default="job",
        help="submit Jobs (default), JobSets (atoll only) or both, one run each (atoll only)",
    )
    p.add_argument("--background-load", type=count, default=0, metavar="N")
    p.add_argument("--timeout", type=float, default=900, help="seconds per controller")
    p.add_argument("--profile", action="store_true", help="sample atoll with py-spy")
    p.add_argument(
        "--profile-rate", type=int, default=100, help="py-spy samples per second (--profile)"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--out", type=Path, help="where logs go (default a new temp dir)")
    return p


def main() -> None:
    args = parser().parse_args()
    budget = Budget.parse(args.budget)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    base = args.out or Path(tempfile.gettempdir()) / f"atoll-bench-jobs-{stamp}"
    base.mkdir(parents=True, exist_ok=True)
    out = Console(stderr=args.json)  # with --json, stdout carries only the JSON
    if args.kind != "job":
        if args.only == "kueue":
            raise SystemExit("--kind jobset|both: atoll only (Kueue's JobSet setup is not here)")
        kinds = ["job", "jobset"] if args.kind == "both" else [args.kind]
        by_kind = {
            k: run_one("atoll", argparse.Namespace(**{**vars(args), "kind": k}), budget, base)
            for k in kinds
        }
        out.print(kinds_table(args, budget, by_kind))
        (base / "results.json").write_text(json.dumps(by_kind, indent=2, default=str))
        if args.json:
            print(json.dumps(by_kind, indent=2, default=str))
        return
    systems = [args.only] if args.only else ["kueue", "atoll"]
    results = {s: run_one(s, args, budget, base) for s in systems}
    out.print(table(args, budget, results))
    for system, res in results.items():
        per_job = ", ".join(
            f"{reason} {n / max(1, res.get('jobs', 0)):.2f}"
            for reason, n in res.get("events", {}).items()
        )
        out.print(f"{system} Events per Job by reason: {per_job}")
    if "atoll" in results:
        print_profile(results["atoll"], out)
        print_requests(results["atoll"], out)
    (base / "results.json").write_text(json.dumps(results, indent=2, default=str))
    if args.json:
        print(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()

"""Kueue's scheduler benchmark, side by side: Kueue's manager and atoll on the same shape, the
same client budget, each on a fresh sandbox (etcd + kube-apiserver on loopback), one after
the other, in one command.

    make bench-kueue SCALE=0.1 [BUDGET=50/100] [LOAD=0]
    python bench/kueue_baseline/run.py [--scale 0.1] [--large-scale] [--pace 1]
        [--budget 50/100] [--budget 300/500] [--background-load 0] [--background-load 1]
        [--only atoll|kueue] [--profile] [--tracemalloc] [--json] [--timeout 600]

For each controller: sandbox up, CRDs (atoll's from crds/, Kueue's from its Go module), the
controller started with qps/burst = the budget, the queues created, then the generator
(creation at the shape's rates) and the runner (Finished after the run time; eviction undone)
until every Workload is Finished or the timeout. One table: wall time, admissions/s, average
and p99 time-to-admission per class, usage, evictions, controller CPU seconds and peak RSS,
and the atoll/Kueue ratios. `--profile` samples atoll with py-spy and prints its top frames;
`--tracemalloc` runs atoll with tracemalloc and prints its biggest live allocation sites at
the end of the run (its CPU and RSS are then not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import math
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "operator")]

from controllers import (  # noqa: E402
    Atoll,
    Budget,
    Controller,
    Kueue,
    profile_top,
    start_py_spy,
    stop_py_spy,
    teardown,
)
from generator import Shape, create_queues, create_workloads, shape_from_args  # noqa: E402
from kubeclient import KubeClient  # noqa: E402
from load import BackgroundLoad, count  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from runner import Runner  # noqa: E402

from atoll.sandbox.cluster import Sandbox  # noqa: E402

console = Console(stderr=True)


async def drive(
    controller: Controller, sandbox: Sandbox, shape: Shape, limit_s: float, workdir: Path
) -> Any:
    """Queues, then Workloads at the shape's rates while the runner finishes them."""
    # Two connection pools: the generator's creates must not delay the runner's Finished
    # writes (that would lengthen runs, and more so for the faster controller).
    async with (
        KubeClient.from_kubeconfig(sandbox.kubeconfig, connections=128) as client,
        KubeClient.from_kubeconfig(sandbox.kubeconfig, connections=64) as runner_client,
    ):
        await create_queues(client, shape)
        runner = Runner(runner_client, shape)
        harness_cpu = time.process_time()
        watch = asyncio.create_task(runner.run())
        await asyncio.sleep(1.0)  # the watch is established and the queues are seen
        runner.started = time.monotonic()
        gen = asyncio.create_task(create_workloads(client, shape))
        deadline = runner.started + limit_s
        timed_out = False
        try:
            while not runner.all_finished.is_set():
                for task in (watch, gen):
                    if task.done() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                if not controller.alive():
                    raise RuntimeError(f"{controller.name} exited:\n{controller.tail()}")
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                await asyncio.sleep(0.2)
        finally:
            end = runner.last_finish if runner.all_finished.is_set() else time.monotonic()
            gen_s = await gen if gen.done() and gen.exception() is None else math.nan
            for task in (watch, gen):
                task.cancel()
            await asyncio.gather(watch, gen, return_exceptions=True)
            await runner.close()
        summary = runner.summary(end)
        (workdir / "timeline.json").write_text(json.dumps(runner.timeline_doc()))
        # this process (generator + runner) competes for the same cores: report its CPU
        summary["harness_cpu_s"] = time.process_time() - harness_cpu
        summary["apiserver_writes"] = await apiserver_writes(client)
        events = await client.request("GET", "/api/v1/events")
        summary["events"] = len(events.get("items") or [])
        summary["timed_out"] = timed_out
        summary["generation_s"] = gen_s
        return summary


async def apiserver_writes(client: KubeClient) -> dict[str, float]:
    """Mutating requests the API server served in this sandbox, by resource/subresource and
    verb (`apiserver_request_total`): everybody's writes, the benchmark's own included."""
    async with client.session.get(client.server + "/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if labels.get("verb") not in ("POST", "PUT", "PATCH", "APPLY", "DELETE"):
            continue
        key = "/".join(filter(None, (labels.get("resource"), labels.get("subresource"))))
        key = f"{labels['verb']} {key}"
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run_one(
    system: str, shape: Shape, budget: Budget, args: argparse.Namespace, base: Path
) -> dict[str, Any]:
    workdir = base / f"{system}-{budget.qps}-{budget.burst}-load{args.load}"
    workdir.mkdir(parents=True)
    sandbox = Sandbox(root=Path(tempfile.mkdtemp(prefix=f"atoll-bench-{system}-")) / "sb")
    controller: Controller | None = None
    spy = None
    result: dict[str, Any] = {"system": system, "budget": str(budget), "workdir": str(workdir)}
    try:
        t0 = time.monotonic()
        console.print(f"[bold]{system}[/] at budget {budget}: fresh sandbox …")
        sandbox.up(None, log=lambda m: console.print(f"  [dim]{m}[/]"))
        if system == "kueue":
            controller = Kueue(sandbox, budget, workdir, atoll_crds=args.kueue_on_atoll_crds)
            result["version"] = controller.version
            if args.kueue_on_atoll_crds:
                result["version"] += " (atoll CRDs)"
        else:
            controller = Atoll(sandbox, budget, workdir, tracemalloc=args.tracemalloc)
        # tracemalloc slows the start-up (the models' schemas are built under it)
        controller.start(timeout=900 if args.tracemalloc else 120)
        console.print(f"  {system} ready (pid {controller.pid}) in {time.monotonic() - t0:.1f}s")
        if args.profile and system == "atoll":
            spy = start_py_spy(controller.pid, workdir / "atoll.pyspy.txt")
        result.update(asyncio.run(drive(controller, sandbox, shape, args.timeout, workdir)))
        result.update(controller.sample())
        scraped = controller.scrape()
        result["admission_attempts"] = scraped.get("attempts", {})
        if isinstance(controller, Atoll):
            result["api_requests"] = scraped.get("requests", {})
            report = controller.dump_tracemalloc()
            if report is not None:
                console.print(f"atoll tracemalloc ({controller.tracemalloc_out}):")
                console.print("\n".join(report.splitlines()[:60]), markup=False, highlight=False)
        stop_py_spy(spy)
        if spy is not None:
            result["profile"] = profile_top(workdir / "atoll.pyspy.txt")
        console.print(
            f"  done: {result['finished']}/{result['expected']} finished in "
            f"{result['wall_s']:.1f}s{' (TIMED OUT)' if result['timed_out'] else ''}"
        )
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        console.print(f"[red]{system} failed:[/] {result['error']}")
        traceback.print_exc()
    finally:
        teardown(sandbox, controller, spy)
    return result


# -- report ----------------------------------------------------------------------------------
def _fmt(v: float, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    return f"{v:,.1f}{unit}" if abs(v) >= 10 else f"{v:,.2f}{unit}"


def rows(res: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """(label, value, lower_is_better) per line of the table."""
    if "wall_s" not in res:
        return []
    out: list[tuple[str, float, bool]] = [
        ("finished / expected", res["finished"] / max(1, res["expected"]), False),
        ("wall time (s)", res["wall_s"], True),
        # the generator shares the cores: on a busy node it creates the Workloads late, and
        # wall time and time-to-admission follow it (not a property of the controller)
        ("generator: all Workloads created (s)", res.get("generation_s", math.nan), True),
        ("admissions/s", res["admissions_per_s"], False),
    ]
    for name, c in res["classes"].items():
        out.append((f"{name}: avg time-to-admission (ms)", c["avg_ms"], True))
        out.append((f"{name}: p99 time-to-admission (ms)", c["p99_ms"], True))
        out.append((f"{name}: avg admitted→Finished (ms)", c.get("avg_run_ms", math.nan), True))
    out += [
        ("usage (% of nominal)", res["usage_pct"], False),
        (
            "controller Workload writes / admission",
            res.get("controller_workload_writes", math.nan) / max(1, res["admitted"]),
            True,
        ),
        ("evictions", float(sum(c["evictions"] for c in res["classes"].values())), True),
        (
            # Kueue's admission attempts: one per cycle that had heads (atoll's likewise)
            "scheduling cycles / admission",
            sum(res.get("admission_attempts", {}).values()) / max(1, res["admitted"])
            if res.get("admission_attempts")
            else math.nan,
            True,
        ),
        (
            "Events in the cluster / admission",
            res.get("events", math.nan) / max(1, res["admitted"]),
            True,
        ),
        ("controller CPU (s)", res.get("cpu_s", math.nan), True),
        ("controller peak RSS (MiB)", res.get("peak_rss_mib", math.nan), True),
        ("harness CPU, generator + runner (s)", res.get("harness_cpu_s", math.nan), True),
    ]
    return out


def table(shape: Shape, budget: str, load: int, results: dict[str, dict[str, Any]]) -> Table:
    kueue, atoll = results.get("kueue", {}), results.get("atoll", {})
    version = kueue.get("version", "")
    t = Table(
        title=f"{shape.name}: {len(shape.cluster_queues)} ClusterQueues, "
        f"{shape.total_workloads:,} Workloads, client budget {budget} (qps/burst), "
        f"background load {load}"
    )
    t.add_column("metric")
    t.add_column(f"Kueue {version}".strip(), justify="right")
    t.add_column("atoll", justify="right")
    t.add_column("atoll/Kueue", justify="right")
    k_rows = {label: v for label, v, _ in rows(kueue)}
    for label, v, lower in rows(atoll) or [(lbl, math.nan, True) for lbl in k_rows]:
        k = k_rows.get(label, math.nan)
        ratio = v / k if k and not math.isnan(k) and not math.isnan(v) else math.nan
        good = (ratio <= 1.0) if lower else (ratio >= 1.0)
        ratio_s = "—" if math.isnan(ratio) else f"[{'green' if good else 'red'}]{ratio:.2f}×[/]"
        t.add_row(label, _fmt(k), _fmt(v), ratio_s)
    for system, res in results.items():
        if "error" in res:
            t.add_row(f"[red]{system} error[/]", res["error"][:60], "", "")
    return t


def print_runner_trouble(system: str, res: dict[str, Any], out: Console) -> None:
    """What the runner had to rescue or could not do, and what stayed unfinished: a run with
    any of it measured a little of the runner too (a rescued Finished is written late)."""
    lines = []
    if res.get("runner_error_count"):
        lines.append(f"{res['runner_error_count']} runner errors, first: {res['runner_errors']}")
    if res.get("runner_rescued"):
        lines.append(
            f"the runner's sweep rescued {res['runner_rescued']}: {res['runner_rescued_workloads']}"
        )
    if res.get("watch_relists") or res.get("watch_restarts"):
        lines.append(f"watch re-listed {res['watch_relists']}x, resumed {res['watch_restarts']}x")
    if res.get("unfinished"):
        lines.append(f"unfinished (first 5): {res['unfinished']}")
    for line in lines:
        out.print(f"{system}: {line}", markup=False, highlight=False)


def print_profile(res: dict[str, Any], out: Console) -> None:
    prof = res.get("profile")
    if not prof:
        return
    samples = prof.get("samples", [("n", 0)])[0][1]
    for kind in ("self", "total"):
        t = Table(
            title=f"atoll py-spy top frames by {kind} time (% of {samples:.0f} non-idle samples)"
        )
        t.add_column("%", justify="right")
        t.add_column("frame")
        for frame, pct in prof[kind][:20]:
            t.add_row(f"{pct:.1f}", frame)
        out.print(t)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiply per-queue counts")
    p.add_argument("--large-scale", action="store_true", help="1,000 CQs, 50,000 Workloads")
    p.add_argument(
        "--pace",
        type=float,
        default=1.0,
        help="multiply the creation intervals (2: Workloads arrive half as fast)",
    )
    p.add_argument(
        "--budget",
        action="append",
        help="client qps/burst for both controllers (repeatable; default 50/100)",
    )
    p.add_argument("--only", choices=("atoll", "kueue"))
    p.add_argument(
        "--kueue-on-atoll-crds",
        action="store_true",
        help="install atoll's CRDs for Kueue too (control for the API server's CRD cost)",
    )
    p.add_argument("--profile", action="store_true", help="sample atoll with py-spy")
    p.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run atoll with tracemalloc and print its live allocations at the end",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--out", type=Path, help="where logs go (default a new temp dir)")
    p.add_argument(
        "--background-load",
        type=count,
        action="append",
        metavar="N",
        help="N busy-looping processes during each controller's run (repeatable; default 0)",
    )
    return p


def background_loads(args: argparse.Namespace) -> list[int]:
    """The background loads to run each budget with, in the order given (default: none)."""
    return list(args.background_load or [0])


def main() -> None:
    args = parser().parse_args()
    shape = shape_from_args(args.scale, args.large_scale, args.pace)
    budgets = [Budget.parse(b) for b in (args.budget or ["50/100"])]
    loads = background_loads(args)
    systems = [args.only] if args.only else ["kueue", "atoll"]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    base = args.out or Path(tempfile.gettempdir()) / f"atoll-bench-kueue-{stamp}"
    base.mkdir(parents=True, exist_ok=True)
    console.print(
        f"{shape.name}: {len(shape.cluster_queues)} ClusterQueues, {shape.total_workloads:,} "
        f"Workloads; budgets {', '.join(map(str, budgets))}; "
        f"background loads {', '.join(map(str, loads))}; logs in {base}"
    )
    all_results: list[dict[str, Any]] = []
    for budget, load in itertools.product(budgets, loads):
        args.load = load
        results = {}
        for s in systems:
            with BackgroundLoad(load):
                results[s] = run_one(s, shape, budget, args, base)
            results[s]["background_load"] = load
        all_results += results.values()
        out = Console(stderr=args.json)  # with --json, stdout carries only the JSON
        out.print(table(shape, str(budget), load, results))
        for s, res in results.items():
            changes = ", ".join(f"{k} {n}" for k, n in res.get("workload_changes", {}).items())
            out.print(f"{s}: Workload changes seen on the watch: {changes}")
            for message, n in res.get("pending_messages", {}).items():
                out.print(f"  {n:>6} pending statuses: {message[:150]}")
            if res.get("preemptors"):
                out.print(
                    f"  {res['preemptors']} preemptors, {res['preemption_rounds']} rounds of"
                    " preemption (evictions by one preemptor > 0.5 s apart start a new round)"
                )
            for kind, n in res.get("eviction_kinds", {}).items():
                out.print(f"  {n:>6} evictions: {kind}")
            print_runner_trouble(s, res, out)
        if "atoll" in results:
            print_profile(results["atoll"], out)
            for labels, n in sorted(results["atoll"].get("api_requests", {}).items()):
                out.print(f"atoll API requests {labels}: {n:.0f}")
    (base / "results.json").write_text(json.dumps(all_results, indent=2, default=str))
    if args.json:
        print(json.dumps(all_results, indent=2, default=str))


if __name__ == "__main__":
    main()

"""Simulation results for people: rich tables of Jobs, ClusterQueue usage and a comparison."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from atoll.sim.results import JobRecord, JobState, SimResult

MAX_ROWS = 200
"""Longer Job tables show the first and last rows only (use --json for all)."""


def _t(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.2f}h"
    if value >= 60:
        return f"{value / 60:.1f}m"
    return f"{value:g}s"


_STYLE = {
    JobState.FINISHED: "green",
    JobState.RUNNING: "cyan",
    JobState.PENDING: "yellow",
    JobState.DEADLOCKED: "bold red",
}


def _short_names(jobs: Sequence[JobRecord]) -> tuple[str, dict[str, str]]:
    """Job names without their namespace when all share one (said in the title)."""
    namespaces = {j.name.partition("/")[0] for j in jobs}
    if len(namespaces) != 1:
        return "", {j.name: j.name for j in jobs}
    return f" (namespace {next(iter(namespaces))})", {
        j.name: j.name.partition("/")[2] for j in jobs
    }


def jobs_table(result: SimResult) -> Table:
    """One row per Job, readable at 80 columns: numbers never wrap, names and places fold;
    the queue and evictions columns only when they say something."""
    ns, names = _short_names(result.jobs)
    jobs = result.jobs
    queues = len({j.cluster_queue for j in jobs}) > 1
    evictions = any(j.evictions for j in jobs)
    table = Table(
        title=f"{result.scenario} — {result.mode.value}: Jobs{ns}",
        title_justify="left",
        caption="GPUs: pods × GPUs per pod; times from the start"
        + ("; ev: evictions" if evictions else ""),
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
    )
    table.add_column("job", overflow="fold", ratio=2, min_width=8)
    if queues:
        table.add_column("queue", overflow="fold", ratio=1, min_width=6)
    for col in ("GPUs", "arrive", "start", "end", "wait"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("placed", overflow="fold", ratio=3, min_width=10)
    if evictions:
        table.add_column("ev", justify="right", no_wrap=True)
    table.add_column("state", overflow="fold", min_width=8)
    shown = jobs if len(jobs) <= MAX_ROWS else jobs[: MAX_ROWS // 2] + jobs[-MAX_ROWS // 2 :]
    for i, j in enumerate(shown):
        if len(jobs) > MAX_ROWS and i == MAX_ROWS // 2:
            table.add_row(f"… {len(jobs) - MAX_ROWS} more", *[""] * (len(table.columns) - 1))
        cells: list[RenderableType] = [names[j.name]]
        if queues:
            cells.append(j.cluster_queue or "-")
        cells += [
            _gpus(j.pods, j.gpus) if j.pods else "-",
            _t(j.arrival),
            _t(j.started),
            _t(j.finished),
            _t(j.wait),
            " ".join(p for p in (j.flavor, j.domain) if p) or "-",
        ]
        if evictions:
            cells.append(str(j.evictions))
        cells.append(Text(j.state.value, style=_STYLE[j.state]))
        table.add_row(*cells)
    return table


def waiting_lines(result: SimResult) -> list[Text]:
    """Why each Job that never finished is (or was last) waiting, in Kueue's words."""
    ns, names = _short_names(result.jobs)
    out = []
    for j in result.jobs:
        if j.finished is not None or j.reason is None:
            continue
        why = f"{j.reason}: {j.message}" if j.message else j.reason
        out.append(Text.assemble((names[j.name], "bold"), f" {j.state.value.lower()}: {why}"))
    if out:
        out.insert(0, Text(f"{result.mode.value}: why Jobs{ns} did not finish", style="bold"))
    return out


def usage_table(result: SimResult) -> Table:
    """GPUs per ClusterQueue over the run: peak and time-weighted mean, and queue length."""
    tl = result.timeline
    table = Table(
        title=f"{result.scenario} — {result.mode.value}: ClusterQueue GPU usage over time",
        title_justify="left",
    )
    cols = ("cluster queue", "peak GPUs", "mean GPUs", "peak waiting", "mean waiting", "mean wait")
    for col in cols:
        table.add_column(col, justify="left" if col == "cluster queue" else "right")
    span = (tl.times[-1] - tl.times[0]) if len(tl.times) > 1 else 0.0
    pending = tl.column("pending")
    waits: dict[str, list[float]] = {}
    for j in result.jobs:
        if j.wait is not None:
            waits.setdefault(j.cluster_queue or "-", []).append(j.wait)

    def mean(col: Sequence[int]) -> float:
        if span <= 0:
            return float(col[-1]) if col else 0.0
        total = sum(col[i] * (tl.times[i + 1] - tl.times[i]) for i in range(len(col) - 1))
        return total / span

    for cq, used in sorted(tl.column("usage").items()):
        waiting: Sequence[int] = pending.get(cq, ())
        table.add_row(
            cq,
            str(max(used, default=0)),
            f"{mean(used):.1f}",
            str(max(waiting, default=0)),
            f"{mean(waiting):.1f}",
            _t(sum(w) / len(w)) if (w := waits.get(cq)) else "-",
        )
    return table


def summary_table(results: Sequence[SimResult]) -> Table:
    table = Table(title="summary", title_justify="left")
    table.add_column("")
    for r in results:
        table.add_column(r.mode.value, justify="right")
    sums = [r.summary() for r in results]
    rows = (
        ("Jobs finished", "finished", str),
        ("Jobs never finished", "unfinished", str),
        ("makespan", "makespan", _t),
        ("mean wait", "meanWait", _t),
        ("p95 wait", "p95Wait", _t),
        ("evictions", "evictions", str),
        ("GPU-hours of useful work", "gpuHoursUseful", lambda v: f"{v:.1f}"),
        ("GPU-hours lost to eviction", "gpuHoursLostToEviction", lambda v: f"{v:.1f}"),
        ("GPU-hours held, no progress", "gpuHoursHeldIdle", lambda v: f"{v:.1f}"),
        ("engine cycles", "cycles", str),
        ("deadlock", "deadlocked", lambda v: "YES" if v else "no"),
    )
    for label, key, fmt in rows:
        table.add_row(label, *[fmt(s[key]) if s[key] is not None else "-" for s in sums])
    return table


def report(results: Sequence[SimResult], *, jobs: bool = True) -> RenderableType:
    parts: list[RenderableType] = []
    for r in results:
        if jobs:
            parts.append(jobs_table(r))
            parts.extend(waiting_lines(r))
        parts.append(usage_table(r))
        if r.deadlock is not None:
            parts.append(Text("DEADLOCK: " + r.deadlock.describe(), style="bold red"))
        parts.extend(Text(f"note: {n}", style="dim") for n in r.notes)
    parts.append(summary_table(results))
    return Group(*parts)


def print_report(results: Sequence[SimResult], console: Console | None = None) -> None:
    (console or Console()).print(report(results))


def _gpus(pods: int, gpus: int) -> str:
    """`pods×GPUs per pod`, or `pods: GPUs` for a gang whose pod sets differ in size."""
    return f"{pods}×{gpus // pods}" if gpus % pods == 0 else f"{pods}: {gpus}"

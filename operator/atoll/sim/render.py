"""Simulation results for people: rich tables of Jobs, ClusterQueue usage and a comparison."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from atoll.sim.results import JobState, SimResult

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


def jobs_table(result: SimResult) -> Table:
    table = Table(title=f"{result.scenario} — {result.mode.value}: Jobs", title_justify="left")
    for col in ("job", "queue", "pods", "GPUs", "arrival", "admitted", "started", "finished"):
        table.add_column(col, justify="right" if col not in ("job", "queue") else "left")
    for col in ("wait", "flavor", "domain", "evictions", "state"):
        table.add_column(col, justify="right" if col in ("wait", "evictions") else "left")
    jobs = result.jobs
    shown = jobs if len(jobs) <= MAX_ROWS else jobs[: MAX_ROWS // 2] + jobs[-MAX_ROWS // 2 :]
    for i, j in enumerate(shown):
        if len(jobs) > MAX_ROWS and i == MAX_ROWS // 2:
            table.add_row(f"… {len(jobs) - MAX_ROWS} more", *[""] * 12)
        state = j.state.value if j.reason is None else f"{j.state.value} ({j.reason})"
        table.add_row(
            j.name,
            j.cluster_queue or "-",
            str(j.pods),
            str(j.gpus),
            _t(j.arrival),
            _t(j.admitted),
            _t(j.started),
            _t(j.finished),
            _t(j.wait),
            j.flavor or "-",
            j.domain or "-",
            str(j.evictions),
            Text(state, style=_STYLE[j.state]),
        )
    return table


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
        parts.append(usage_table(r))
        if r.deadlock is not None:
            parts.append(Text("DEADLOCK: " + r.deadlock.describe(), style="bold red"))
        parts.extend(Text(f"note: {n}", style="dim") for n in r.notes)
    parts.append(summary_table(results))
    return Group(*parts)


def print_report(results: Sequence[SimResult], console: Console | None = None) -> None:
    (console or Console()).print(report(results))

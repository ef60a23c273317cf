"""PNG plots of simulation results (matplotlib, Agg backend: no display needed).

`write_plots(results, out)` writes, for one run or a comparison of runs:
- `gpu-occupancy.png`: GPUs bound to pods over time per node group, and the GPUs of Jobs
  actually making progress (a partly placed Job holds GPUs but does nothing);
- `queue-length.png`: Jobs waiting per ClusterQueue over time;
- `cq-usage.png`: GPUs held per ClusterQueue over time (admitted quota; bound GPUs in the
  greedy run, which has no quota), with each ClusterQueue's nominal GPU quota (dashed) and
  nominal + borrowingLimit (dotted) in its colour;
- `wait-times.png`: the distribution of waiting times (arrival to start);
- `gpu-nodes.png`: GPUs bound on each node over time, one row per node (clusters of at most
  `MAX_NODE_ROWS` nodes), where fragmentation and half-placed gangs show.

Panels of one figure share their x range (0 to the latest end), counts have integer ticks,
and legends sit below the axes so that they never hide a curve.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from atoll.sim.results import SimResult

MAX_POINTS = 4000
"""Timelines longer than this are thinned (every k-th sample) before plotting."""
DPI = 80


def _thin(n: int) -> range:
    return range(0, n, max(1, n // MAX_POINTS))


def _minutes(result: SimResult, idx: range) -> list[float]:
    return [result.timeline.times[i] / 60.0 for i in idx]


def _legend(ax: Axes) -> None:
    """Below the axes, in as many columns as fit, never over the data."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(4, len(handles)),
            fontsize="small", frameon=False,
        )  # fmt: skip


def _axes(ax: Axes, title: str, ylabel: str, end: float) -> None:
    ax.set_title(title)
    ax.set_xlabel("minutes")
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, max(end, 1.0) / 60.0)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(ax)


def _occupancy(ax: Axes, result: SimResult, end: float) -> None:
    tl = result.timeline
    idx = _thin(len(tl.times))
    xs = _minutes(result, idx)
    groups = tl.column("bound")
    ys = [[col[i] for i in idx] for col in groups.values()]
    if ys:
        ax.stackplot(xs, *ys, labels=[f"bound: {g}" for g in groups], step="post", alpha=0.6)
    if "busy" in tl.series:
        busy = tl.series["busy"]
        ax.step(xs, [busy[i] for i in idx], where="post", color="black", label="making progress")
    ax.axhline(sum(result.gpu_capacity.values()), color="grey", linestyle=":", label="capacity")
    _axes(ax, f"{result.mode.value}: GPUs over time", "GPUs", end)


def _queues(ax: Axes, result: SimResult, end: float) -> None:
    tl = result.timeline
    idx = _thin(len(tl.times))
    xs = _minutes(result, idx)
    for cq, col in sorted(tl.column("pending").items()):
        ax.step(xs, [col[i] for i in idx], where="post", label=cq)
    _axes(ax, f"{result.mode.value}: Jobs waiting", "Jobs", end)


def _usage(ax: Axes, result: SimResult, end: float) -> None:
    tl = result.timeline
    idx = _thin(len(tl.times))
    xs = _minutes(result, idx)
    for cq, col in sorted(tl.column("usage").items()):
        (line,) = ax.step(xs, [col[i] for i in idx], where="post", label=cq)
        quota = result.gpu_quota.get(cq)
        if quota is None:
            continue
        nominal, borrowing = quota
        ax.axhline(nominal, color=line.get_color(), linestyle="--", linewidth=1)
        if borrowing is not None and borrowing > 0:
            ax.axhline(nominal + borrowing, color=line.get_color(), linestyle=":", linewidth=1)
    if result.gpu_quota:
        ax.plot([], [], color="grey", linestyle="--", label="nominal quota")
        ax.plot([], [], color="grey", linestyle=":", label="+ borrowingLimit")
    _axes(ax, f"{result.mode.value}: GPUs held per ClusterQueue", "GPUs", end)


def _waits(ax: Axes, results: Sequence[SimResult]) -> None:
    for r in results:
        waits = [w / 60.0 for j in r.jobs if (w := j.wait) is not None]
        never = sum(1 for j in r.jobs if j.wait is None)
        label = f"{r.mode.value} ({never} never started)" if never else r.mode.value
        if waits:
            ax.hist(waits, bins=30, alpha=0.5, label=label)
        else:
            ax.plot([], [], label=label)
    ax.set_title("waiting time (arrival to start)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("Jobs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(ax)


def _nodes(ax: Axes, result: SimResult, end: float) -> None:
    nt = result.nodes
    assert nt is not None
    end = max(end, nt.times[-1] if nt.times else 0.0) or 1.0
    edges = [t / 60.0 for t in nt.times] + [end / 60.0 + 1e-9]
    grid = [[row[n] for row in nt.bound] for n in range(len(nt.names))]
    mesh = ax.pcolormesh(
        edges, range(len(nt.names) + 1), grid, vmin=0, vmax=max(nt.capacity, default=1),
        cmap="viridis", shading="flat",
    )  # fmt: skip
    if len(nt.names) <= 40:
        ax.set_yticks([i + 0.5 for i in range(len(nt.names))], nt.names, fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlim(0, end / 60.0)
    ax.set_title(f"{result.mode.value}: GPUs bound per node")
    ax.set_xlabel("minutes")
    ax.figure.colorbar(mesh, ax=ax, label="GPUs")


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def panels(
    results: Sequence[SimResult], draw: Callable[[Axes, SimResult, float], None], height: float
) -> Figure:
    """One panel per run, side by side, sharing the x range (0 to the latest end)."""
    end = max((r.end for r in results), default=0.0)
    end = max([end, *(r.timeline.times[-1] for r in results if len(r.timeline.times))])
    fig, axes = plt.subplots(
        1, len(results), figsize=(6 * len(results), height), squeeze=False, sharex=True,
        sharey=True,
    )  # fmt: skip
    for ax, r in zip(axes[0], results, strict=True):
        draw(ax, r, end)
    return fig


Draw = Callable[[Axes, SimResult, float], None]
PANELS: dict[str, tuple[Draw, float]] = {
    "gpu-occupancy": (_occupancy, 4.2),
    "queue-length": (_queues, 3.8),
    "cq-usage": (_usage, 3.8),
}
"""The figures with one panel per run: how each panel is drawn, and the figure height."""


def write_plots(results: Sequence[SimResult], out: Path, prefix: str = "") -> list[Path]:
    """One figure per kind, one panel per run, named `<prefix><kind>.png`; returns the
    files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _save(panels(results, draw, height), out / f"{prefix}{kind}.png")
        for kind, (draw, height) in PANELS.items()
    ]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    _waits(ax, results)
    written.append(_save(fig, out / f"{prefix}wait-times.png"))
    with_nodes = [r for r in results if r.nodes is not None and r.nodes.times]
    if with_nodes:
        end = max(r.end for r in results)
        rows = max(len(r.nodes.names) for r in with_nodes if r.nodes is not None)
        height = min(12.0, 1.5 + 0.18 * rows)
        fig, _ = plt.subplots(1, len(with_nodes), figsize=(6.5 * len(with_nodes), height))
        for ax, r in zip(fig.axes[: len(with_nodes)], with_nodes, strict=True):
            _nodes(ax, r, end)
        written.append(_save(fig, out / f"{prefix}gpu-nodes.png"))
    return written


def write_policy_plots(results: Mapping[str, SimResult], big: int, out: Path) -> list[Path]:
    """`--compare-policies`: the big gangs' waits (arrival → admission, one point per
    gang) and the GPUs busy over time, one line per policy; `policies.png`."""
    fig, (waits_ax, busy_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
    for policy, r in results.items():
        gangs = [j for j in r.jobs if j.gpus >= big]
        xs = [j.arrival / 60.0 for j in gangs]
        ys = [((j.wait if j.wait is not None else r.end - j.arrival) / 60.0) for j in gangs]
        waits_ax.plot(xs, ys, marker="o", linestyle="-", label=policy)
        tl = r.timeline
        busy = tl.series.get("busy")
        if busy is not None:
            times = [t / 60.0 for t in tl.times]
            busy_ax.step(times, list(busy), where="post", label=policy, linewidth=1)
    waits_ax.set_title(f"jobs of {big}+ GPUs: wait (arrival to admission)")
    waits_ax.set_xlabel("arrival (minutes)")
    waits_ax.set_ylabel("wait (minutes)")
    _legend(waits_ax)
    capacity = max((sum(r.gpu_capacity.values()) for r in results.values()), default=0)
    if capacity:
        busy_ax.axhline(capacity, color="grey", linestyle="--", linewidth=1, label="GPUs")
    busy_ax.set_title("GPUs busy")
    busy_ax.set_xlabel("minutes")
    busy_ax.set_ylabel("GPUs")
    _legend(busy_ax)
    return [_save(fig, out / "policies.png")]

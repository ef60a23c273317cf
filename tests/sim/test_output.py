"""What `atoll simulate` writes: JSON, PNG plots and the tables."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from atoll.cli import simulate_cmd
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from atoll.sim.plots import write_plots
from atoll.sim.render import report
from atoll.sim.results import align_ends
from tests.sim.builders import (
    cluster_queue,
    flavor,
    job,
    local_queue,
    nodes,
    scenario,
    six_gpus,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _simulate(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    simulate_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", *argv])
    return int(args.func(args))


def test_json_output_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert _simulate(str(EXAMPLES / "deadlock.yaml"), "--compare", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schemaVersion"] == 1
    assert doc["scenario"] == "deadlock"
    gang, greedy = doc["runs"]
    assert (gang["mode"], greedy["mode"]) == ("gang", "greedy")
    assert set(gang) >= {"end", "gpuCapacity", "summary", "jobs", "timeline", "deadlock"}
    assert gang["gpuCapacity"] == {"six": 6}
    assert set(gang["jobs"][0]) == {
        "name", "arrival", "pods", "gpus", "clusterQueue", "admitted", "started",
        "finished", "wait", "flavor", "domain", "evictions", "reason", "message", "state",
    }  # fmt: skip
    tl = gang["timeline"]
    assert all(len(col) == len(tl["times"]) for col in tl["series"].values())
    assert {"usage/training", "pending/training", "bound/six", "busy", "partial"} <= set(
        tl["series"]
    )
    assert gang["deadlock"] is None
    assert gang["summary"]["finished"] == 2
    assert greedy["summary"]["deadlocked"] is True
    assert {h["job"] for h in greedy["deadlock"]["cycle"]} == {"default/job-a", "default/job-b"}
    # the deadlocked run's timeline is held until the gang run's end, for the plots
    assert greedy["timeline"]["times"][-1] == gang["end"] == 1200.0


def test_until_stops_both_runs_and_their_totals_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = (str(EXAMPLES / "mixed.yaml"), "--compare", "--until", "30m", "--json")
    assert _simulate(*args) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["mode"] for r in runs] == ["gang", "greedy"]
    for run in runs:
        assert run["end"] <= 1800.0
        assert run["timeline"]["times"][-1] == 1800.0
        assert all(j["finished"] is None or j["finished"] <= 1800.0 for j in run["jobs"])
        assert all(j["started"] is None or j["started"] <= 1800.0 for j in run["jobs"])
        assert run["deadlock"] is None  # stopped early: no verdict
        summary = run["summary"]
        held = summary["gpuHoursProgressing"] + summary["gpuHoursHeldIdle"]
        assert 0 < held <= 64 * 0.5  # 64 GPUs for half an hour at the most
        assert summary["unfinished"] > 0


def test_out_dir_gets_plots_and_results(tmp_path: Path) -> None:
    assert _simulate(str(EXAMPLES / "mixed.yaml"), "--compare", "--out", str(tmp_path)) == 0
    names = ("gpu-occupancy.png", "queue-length.png", "cq-usage.png", "wait-times.png")
    for name in (*names, "gpu-nodes.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 1000
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["summary"]["unfinished"] for r in doc["runs"]] == [0, 0]


def test_plots_of_a_single_run(tmp_path: Path) -> None:
    result = GreedySimulator(six_gpus(job("a"))).run()
    written = write_plots([result], tmp_path / "new")
    assert [p.name for p in written] == [
        "gpu-occupancy.png",
        "queue-length.png",
        "cq-usage.png",
        "wait-times.png",
        "gpu-nodes.png",
    ]
    assert all(p.stat().st_size > 1000 for p in written)
    assert result.nodes is not None
    # 4 pods x 1 GPU on 3 nodes x 2 GPUs: the per-node samples add up to the GPUs bound
    assert max(sum(row) for row in result.nodes.bound) == 4
    assert result.nodes.capacity == (2, 2, 2)


def test_report_names_jobs_and_the_deadlock() -> None:
    scn = six_gpus(job("a"), job("b"))
    result = GreedySimulator(scn).run()
    align_ends([result])
    console = Console(record=True, width=200)
    console.print(report([result]))
    text = console.export_text()
    assert "default/a" in text
    assert "default/b" in text
    assert "DEADLOCK" in text
    assert "wait-for cycle" in text


def test_out_onto_a_file_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = tmp_path / "results"
    taken.write_text("mine")

    def no_run(*args: object, **kw: object) -> None:
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(simulate_cmd, "run_all", no_run)
    assert _simulate(str(EXAMPLES / "deadlock.yaml"), "--out", str(taken)) == 2
    assert f"--out {taken}: exists and is not a directory" in capsys.readouterr().err
    assert taken.read_text() == "mine"


def test_the_jobs_table_reads_at_80_columns_and_says_why_jobs_wait() -> None:
    scn = simulate_cmd.read_scenario(EXAMPLES / "racks.yaml")
    result = GangSimulator(scn, Settings.of(scn.config)).run()
    console = Console(record=True, width=80)
    console.print(report([result]))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(" train-")}
    assert len(rows) == 6  # whole names, one row each
    assert "3×8" in rows["train-0"]
    assert "Finished" in rows["train-0"]
    assert "Jobs (namespace default)" in text
    message = " ".join(text.split())  # the message wraps at 80 columns
    assert (
        "too-wide pending: TopologyPlacementFailed: pod set main needs 40 pods in one "
        "topology.atoll.dev/rack; the largest has room for 32"
    ) in message


def test_bad_scenario_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert _simulate(str(bad)) == 2
    err = capsys.readouterr().err
    assert f"atoll simulate: {bad}: no Nodes and no ClusterShape" in err


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    simulate_cmd.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_what_if_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job("late", pods=4)))
    scenario = str(EXAMPLES / "deadlock.yaml")
    assert _cli("what-if", str(job_file), "--scenario", scenario, "--at", "1m", "--json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["job"] == "default/late"
    assert answer["clusterQueue"] is None  # LocalQueue `lq` is not in that scenario
    assert answer["decision"]["kind"] == "Pending"
    assert "LocalQueue lq doesn't exist" in answer["decision"]["message"]
    assert _cli("what-if", str(job_file), "--kubeconfig", "k", "--scenario", scenario) == 2
    assert "not both" in capsys.readouterr().err
    empty = tmp_path / "empty-kubeconfig"
    empty.write_text("")
    assert _cli("what-if", str(job_file), "--kubeconfig", str(empty)) == 2
    assert f"kubeconfig {empty}: no current-context set" in capsys.readouterr().err
    bad = ("--set", "waitForPodsReady.timeout=soon")
    assert _cli("what-if", str(job_file), "--kubeconfig", str(empty), *bad) == 2
    assert "waitForPodsReady.timeout" in capsys.readouterr().err


def test_the_cli_parser_does_not_load_matplotlib() -> None:
    """Every `atoll` command builds the whole parser, the operator too: plotting is imported
    only when `simulate --out` writes plots."""
    code = (
        "import sys; from atoll.cli.main import build_parser; build_parser(); "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_plot_panels_share_the_x_range_and_show_the_quota() -> None:
    from atoll.sim import plots  # noqa: PLC0415 - matplotlib only where plots are tested

    scn = simulate_cmd.read_scenario(EXAMPLES / "mixed.yaml")
    results = simulate_cmd.run_all(scn, compare=True, until=None, console=Console(quiet=True))
    end = max(r.end for r in results) / 60.0
    for kind, (draw, height) in plots.PANELS.items():
        fig = plots.panels(results, draw, height)
        for ax in fig.axes:
            assert ax.get_xlim() == (0.0, end), kind
            ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
            assert all(float(t).is_integer() for t in ticks), kind
            legend = ax.get_legend()
            assert legend is not None
            box = legend.get_window_extent(fig.canvas.get_renderer())
            assert box.y1 <= ax.get_window_extent().y0, kind  # below the axes, not on them


def test_the_usage_plot_draws_nominal_quota_and_borrowing_limit() -> None:
    from atoll.sim import plots  # noqa: PLC0415 - matplotlib only where plots are tested

    borrower = cluster_queue("cq", gpus=4, cohortName="co")
    borrower["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["borrowingLimit"] = 2
    lender = cluster_queue("lender", gpus=2, cohortName="co")
    scn = scenario(nodes(3, 2), flavor(), borrower, lender, local_queue(), job("a", pods=6))
    result = GangSimulator(scn, Settings.of(scn.config)).run()
    assert result.gpu_quota == {"cq": (4, 2), "lender": (2, None)}  # None: no limit
    ax = plots.panels([result], *plots.PANELS["cq-usage"]).axes[0]

    def levels(style: str) -> set[float]:
        return {
            float(line.get_ydata()[0])
            for line in ax.lines
            if line.get_linestyle() == style and len(line.get_ydata())
        }

    assert levels("--") == {4.0}  # nominal quota of each ClusterQueue with Jobs
    assert levels(":") == {6.0}  # cq: nominal + borrowingLimit; lender has no limit

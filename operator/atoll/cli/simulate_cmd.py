"""`atoll simulate SCENARIO [--compare | --compare-policies] [--out DIR] [--json]`: the engine,
offline."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from atoll.api.configuration import ConfigurationError
from atoll.api.meta import KubeObject
from atoll.cli.errors import FAILED, USAGE, complain
from atoll.cli.explain_cmd import NotQueuedError, live_what_if, print_answer
from atoll.cli.run_cmd import add_configuration_options
from atoll.control.explain import JobWhatIf
from atoll.control.jobframework import ComposeError
from atoll.kube.connection import KubeconfigError
from atoll.kube.live import ClusterReadError
from atoll.sandbox import shapes
from atoll.sim import policies
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from atoll.sim.render import print_report
from atoll.sim.results import SimResult, align_ends
from atoll.sim.scenario import (
    SCENARIO_ANNOTATIONS,
    SHAPE_FILE,
    Scenario,
    ScenarioError,
    load_job,
    load_scenario,
    parse_duration,
)
from atoll.sim.whatif import WhatIf, what_ifs

JSON_SCHEMA_VERSION = 1


def expand_shape(doc: Mapping[str, Any], base: Path) -> list[dict[str, Any]]:
    """A scenario's ClusterShape document → Nodes: inline, or read from the file named by
    the `atoll.dev/shape-file` annotation (relative to the scenario)."""
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    if SHAPE_FILE in annotations:
        shape = shapes.load_shape(base / annotations[SHAPE_FILE])
    else:
        try:
            shape = shapes.ClusterShape.model_validate(doc)
        except ValueError as e:
            raise shapes.ShapeError(f"inline ClusterShape: {e}") from e
    return shapes.nodes(shape)


def read_scenario(path: Path) -> Scenario:
    try:
        return load_scenario(path, expand_shape)
    except shapes.ShapeError as e:
        raise ScenarioError(str(e)) from e


def _progress(console: Console, label: str) -> tuple[Progress, Callable[[int, int, float], None]]:
    bar = Progress(
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs finished · t={task.fields[t]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task(label, total=None, t="0s")

    def update(done: int, total: int, t: float) -> None:
        bar.update(task, completed=done, total=total, t=f"{t:,.0f}s")

    return bar, update


def run_all(
    scn: Scenario, *, compare: bool, until: float | None, console: Console
) -> list[SimResult]:
    results = []
    bar, update = _progress(console, "atoll gang admission")
    with bar:
        results.append(GangSimulator(scn, Settings.of(scn.config, until), update).run())
    if compare:
        bar, update = _progress(console, "pod-by-pod greedy")
        with bar:
            results.append(GreedySimulator(scn, update, until).run())
    align_ends(results, until)
    return results


def as_json(scn: Scenario, results: list[SimResult]) -> dict[str, Any]:
    return {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "scenario": scn.name,
        "runs": [r.to_json() for r in results],
    }


def _out_dir(raw: str | None) -> Path | None:
    """The --out directory, created now so that a bad path fails before the run."""
    if raw is None:
        return None
    out = Path(raw)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {raw}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {raw}: cannot create the directory: {e.strerror}") from e
    return out


def _simulate(args: argparse.Namespace) -> int:
    try:
        out = _out_dir(args.out)
        scn = read_scenario(Path(args.scenario))
        until = parse_duration(args.until) if args.until else None
    except (ScenarioError, ValueError) as e:
        return complain("simulate", e)
    for warning in scn.warnings:
        complain("simulate", f"warning: {warning}")
    err = Console(stderr=True)
    if args.compare_policies:
        if args.compare:
            return complain("simulate", "give --compare or --compare-policies, not both")
        return _compare_policies(scn, until, out, as_json_output=args.json, console=err)
    results = run_all(scn, compare=args.compare, until=until, console=err)
    doc = as_json(scn, results)
    if out is not None:
        # matplotlib is imported only here: every `atoll` command (the operator too) builds
        # this parser, and would otherwise carry its ~40 MiB.
        from atoll.sim.plots import write_plots  # noqa: PLC0415

        for path in write_plots(results, out):
            err.print(f"wrote {path}")
        (out / "results.json").write_text(json.dumps(doc, indent=1))
        err.print(f"wrote {out / 'results.json'}")
    if args.json:
        json.dump(doc, sys.stdout)
        print()
    else:
        print_report(results, Console())
    return 0


def _compare_policies(
    scn: Scenario, until: float | None, out: Path | None, *, as_json_output: bool, console: Console
) -> int:
    """`--compare-policies`: the scenario as BestEffortFIFO, StrictFIFO and Backfill."""
    bars: list[Progress] = []

    def progress(policy: str) -> Callable[[int, int, float], None]:
        for done in bars:
            done.stop()
        bar, update = _progress(console, policy)
        bar.start()
        bars.append(bar)
        return update

    try:
        results = policies.run_policies(scn, until, progress)
    finally:
        for bar in bars:
            bar.stop()
    doc = policies.as_json(scn, results)
    if out is not None:
        from atoll.sim.plots import write_policy_plots  # noqa: PLC0415 (see _simulate)

        big = doc["policies"]["Backfill"]["bigGpus"]
        for path in write_policy_plots(results, big, out):
            console.print(f"wrote {path}")
        (out / "policies.json").write_text(json.dumps(doc, indent=1))
        console.print(f"wrote {out / 'policies.json'}")
    if as_json_output:
        json.dump(doc, sys.stdout)
        print()
    else:
        print_policies(doc, Console())
    return 0


def print_policies(doc: Mapping[str, Any], console: Console) -> None:
    """The three policies side by side (a column each), then Backfill's goals."""
    table = Table(title=f"{doc['scenario']}: waits (arrival to admission)")
    table.add_column("")
    for policy in policies.POLICIES:
        table.add_column(policy, justify="right", no_wrap=True)
    for row in policies.rows(doc):
        table.add_row(*row)
    console.print(table)
    window = doc["policies"]["Backfill"]["window"]
    console.print(f"utilisation over [0, {window / 60:.0f}m] (until the last arrival)")
    console.print("Backfill's goals:")
    for line in policies.goal_lines(doc):
        console.print(line, highlight=False)


def _live_what_if(job: KubeObject, args: argparse.Namespace) -> list[JobWhatIf] | int:
    """The live cluster's answers, or the exit code after saying what went wrong."""
    try:
        return live_what_if(job, args)
    except (KubeconfigError, ConfigurationError, NotQueuedError, ComposeError) as e:
        return complain("what-if", e, USAGE)
    except ClusterReadError as e:
        return complain("what-if", e, FAILED)


def _what_if(args: argparse.Namespace) -> int:
    if args.kubeconfig and args.scenario:
        return complain("what-if", "give either --scenario FILE or --kubeconfig FILE, not both")
    if args.at and not args.scenario:
        return complain("what-if", "--at is for --scenario; a live cluster is asked now")
    try:
        job = load_job(Path(args.job))
    except ScenarioError as e:
        return complain("what-if", e)
    answers: Sequence[WhatIf | JobWhatIf]
    if args.scenario:
        try:
            scn = read_scenario(Path(args.scenario))
            at = parse_duration(args.at) if args.at else 0.0
            answers = what_ifs(scn, job, at=at)
        except (ScenarioError, ValueError) as e:
            return complain("what-if", e)
    else:
        live = _live_what_if(job, args)
        if isinstance(live, int):
            return live
        answers = live
    for answer in answers:  # one per Workload: a LeaderWorkerSet's replica groups
        print_answer(answer, as_json=args.json)
    return 0


def _register_what_if(sub: Any) -> None:
    p = sub.add_parser(
        "what-if",
        help="would this Job (JobSet, MPIJob, TrainJob, LeaderWorkerSet, pod group) be "
        "admitted now, to which flavor, whom would it preempt",
        description=(
            "Adds the Job's Workload to a copy of the state and runs the operator's "
            "scheduling step on it once (quota, topology placement, preemption) without "
            "creating or changing anything: with --scenario, the scenario simulated "
            "up to --at; otherwise the live cluster of --kubeconfig (default $KUBECONFIG), "
            "read-only, including topology and device placement. A TrainJob's pod sets "
            "come from the TrainingRuntime or ClusterTrainingRuntime its spec.runtimeRef "
            "names (in the scenario, or in the cluster); a LeaderWorkerSet gets one answer "
            "per replica group (each group is one Workload, all added before any is asked)."
        ),
    )
    p.add_argument(
        "job",
        help="a manifest of one batch/v1 Job, JobSet, MPIJob, TrainJob or LeaderWorkerSet, "
        "or of the Pods of one pod group (with kueue.x-k8s.io/queue-name)",
    )
    p.add_argument("--scenario", metavar="FILE", help="the cluster, queues and workload")
    p.add_argument("--at", metavar="DURATION", help="point of the scenario to ask at (0s)")
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="live cluster to ask (default: $KUBECONFIG)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the answer as JSON (one line per Workload)",
    )
    add_configuration_options(p)
    p.set_defaults(func=_what_if)


def register(sub: Any) -> None:
    """`atoll simulate` and `atoll what-if`."""
    _register_what_if(sub)
    annotations = "; ".join(f"{k}: {v}" for k, v in SCENARIO_ANNOTATIONS.items())
    p = sub.add_parser(
        "simulate",
        help="simulate a scenario offline with atoll's engine (and compare with greedy)",
        description=(
            "Discrete-event simulation of a scenario file (Kueue objects, a ClusterShape or "
            "Nodes, batch/v1 Jobs, JobSets, MPIJobs, TrainJobs with the TrainingRuntimes "
            "and ClusterTrainingRuntimes they name, LeaderWorkerSets (one Workload per "
            "replica group) and pod groups, each turned into its Workload by the "
            "operator's adapter of its kind, among the kinds the scenario's Configuration "
            "enables in integrations.frameworks) with the same cache, queues, engine and "
            "Workload lifecycle as the operator. A TrainJob whose runtime is missing gets "
            "no Workload and a note naming spec.runtimeRef, as the operator's event says. "
            "Kueue objects are checked as the API server checks them (schema, CEL rules, "
            "unknown fields; a kueue.x-k8s.io/v1beta1 object is converted to v1beta2 first, "
            "as the API server stores it, then checked as v1beta2); a wrong object or "
            "option ends the command with one line naming it and exit code 2. "
            "Annotations (on a Job, JobSet, MPIJob, TrainJob or LeaderWorkerSet, whose "
            "every replica group then runs that long, or on a pod group's first Pod): "
            f"{annotations}."
        ),
    )
    p.add_argument("scenario", help="scenario YAML (see examples/scenarios/)")
    p.add_argument(
        "--compare",
        action="store_true",
        help="also run pod-by-pod greedy placement (kube-scheduler alone) and compare",
    )
    p.add_argument(
        "--compare-policies",
        action="store_true",
        help="run the scenario with every ClusterQueue BestEffortFIFO, StrictFIFO, and "
        "BestEffortFIFO with reservation and backfill (atoll.dev/backfill), and compare "
        "the waits by Job size and the GPU utilisation",
    )
    p.add_argument(
        "--out", metavar="DIR", help="write PNG plots and results.json here (created if missing)"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--until",
        metavar="DURATION",
        help="stop the simulation (both runs, with --compare) at this time, e.g. 30m",
    )
    p.set_defaults(func=_simulate)

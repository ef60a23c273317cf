"""A simulation scenario: plain Kubernetes YAML read into `atoll.api` models.

A scenario file holds, in any order, Kueue's objects (ResourceFlavor, ClusterQueue, Cohort,
LocalQueue, WorkloadPriorityClass), PriorityClasses, Namespaces, the cluster (Nodes, or an
`atoll.dev/v1alpha1` ClusterShape, inline or by reference), an optional Kueue
`Configuration` (waitForPodsReady, fairSharing) and batch/v1 Jobs. Each Job says when it
arrives and how long it runs with annotations (`SCENARIO_ANNOTATIONS`).

The sim layer cannot import the sandbox, so a ClusterShape is turned into Nodes by a
`ShapeExpander` the caller passes (the CLI passes `atoll.sandbox.shapes`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.configuration import Configuration
from atoll.api.core import Job, Namespace, Node, PriorityClass
from atoll.api.kinds import UnknownKindError, parse_object
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import KubeObject
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.topology import Topology
from atoll.state import tas

ARRIVAL = "atoll.dev/arrival"
"""Seconds from the start of the simulation when the Job is created (default 0)."""
RUN_DURATION = "atoll.dev/run-duration"
"""How long the Job runs once all its pods run, as a Go duration ("90s", "1h30m")."""
REPEAT = "atoll.dev/repeat"
"""Create this many copies of the Job, named `<name>-<k>` (default 1)."""
REPEAT_EVERY = "atoll.dev/repeat-every"
"""Arrival spacing of the copies, as a Go duration (default "0s")."""
SHAPE_FILE = "atoll.dev/shape-file"
"""On a ClusterShape document: read the shape from this file (relative to the scenario)."""
SCENARIO_ANNOTATIONS = {
    ARRIVAL: "seconds from the start when the Job is created (default 0)",
    RUN_DURATION: "run time once all pods run, a Go duration such as 90s or 1h30m",
    REPEAT: "number of copies of the Job, named <name>-<k> (default 1)",
    REPEAT_EVERY: "arrival spacing of the copies, a Go duration (default 0s)",
}
SHAPE_KIND = ("atoll.dev/v1alpha1", "ClusterShape")
CONFIG_KIND = ("config.kueue.x-k8s.io/v1beta2", "Configuration")

ShapeExpander = Callable[[Mapping[str, Any], Path], list[dict[str, Any]]]
"""(ClusterShape document, scenario directory) → Node objects."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


class ScenarioError(ValueError):
    """The scenario cannot be read; the message names the file and the object."""


def parse_duration(text: str) -> float:
    """A Go duration ("1h30m", "90s", "1.5h", "0") in seconds."""
    raw = text.strip()
    if raw in ("0", ""):
        return 0.0
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    pos, total = 0, 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


@dataclass(frozen=True, slots=True, kw_only=True)
class SimJob:
    """A Job of the scenario with its arrival and run time (seconds)."""

    job: Job
    arrival: float
    duration: float
    seq: int
    """Position in the scenario (ties between equal arrivals)."""

    @property
    def key(self) -> str:
        return f"{self.job.namespace or 'default'}/{self.job.name}"


@dataclass(slots=True, kw_only=True)
class Scenario:
    name: str
    flavors: list[ResourceFlavor] = field(default_factory=list)
    cluster_queues: list[ClusterQueue] = field(default_factory=list)
    cohorts: list[Cohort] = field(default_factory=list)
    local_queues: list[LocalQueue] = field(default_factory=list)
    workload_classes: list[WorkloadPriorityClass] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    jobs: list[SimJob] = field(default_factory=list)
    config: Configuration = field(default_factory=Configuration)
    ignored: list[str] = field(default_factory=list)
    """`Kind/name` of documents the simulator does not use."""


def _job_copies(job: Job, where: str, seq: int) -> list[SimJob]:
    ann = job.metadata.annotations or {}
    try:
        arrival = float(ann.get(ARRIVAL, "0"))
        tas.podset_topology_request(job.spec.template)  # conflicting annotations: an error
        if RUN_DURATION in ann:
            duration = parse_duration(ann[RUN_DURATION])
        elif job.spec.active_deadline_seconds is not None:
            duration = float(job.spec.active_deadline_seconds)
        else:
            raise ValueError(f"needs the annotation {RUN_DURATION} (or activeDeadlineSeconds)")
        repeat = int(ann.get(REPEAT, "1"))
        every = parse_duration(ann.get(REPEAT_EVERY, "0s"))
    except ValueError as e:
        raise ScenarioError(f"{where}: Job {job.name}: {e}") from e
    if arrival < 0 or duration <= 0 or repeat < 1 or every < 0:
        raise ScenarioError(
            f"{where}: Job {job.name}: arrival and repeat-every must be >= 0, run-duration > 0, "
            "repeat >= 1"
        )
    if repeat == 1:
        return [SimJob(job=job, arrival=arrival, duration=duration, seq=seq)]
    out = []
    for k in range(repeat):
        meta = job.metadata.model_copy(update={"name": f"{job.name}-{k}"})
        copy = job.model_copy(update={"metadata": meta})
        out.append(SimJob(job=copy, arrival=arrival + k * every, duration=duration, seq=seq + k))
    return out


def _add(scn: Scenario, obj: KubeObject, where: str) -> None:
    match obj:
        case ResourceFlavor():
            scn.flavors.append(obj)
        case ClusterQueue():
            scn.cluster_queues.append(obj)
        case Cohort():
            scn.cohorts.append(obj)
        case LocalQueue():
            scn.local_queues.append(obj)
        case WorkloadPriorityClass():
            scn.workload_classes.append(obj)
        case PriorityClass():
            scn.priority_classes.append(obj)
        case Node():
            scn.nodes.append(obj)
        case Topology():
            scn.topologies.append(obj)
        case Job():
            if not obj.metadata.namespace:
                obj = obj.model_copy(
                    update={"metadata": obj.metadata.model_copy(update={"namespace": "default"})}
                )
            scn.jobs.extend(_job_copies(obj, where, len(scn.jobs)))
        case Namespace():
            scn.namespaces[obj.name] = dict(obj.metadata.labels or {})
        case _:
            scn.ignored.append(f"{obj.KIND}/{obj.name}")


def _add_raw(
    scn: Scenario, raw: Mapping[str, Any], where: str, base: Path, expand: ShapeExpander | None
) -> None:
    kind = (str(raw.get("apiVersion", "")), str(raw.get("kind", "")))
    if kind == SHAPE_KIND:
        if expand is None:
            raise ScenarioError(f"{where}: a ClusterShape needs a shape expander")
        for node in expand(raw, base):
            scn.nodes.append(Node.model_validate(node))
        return
    if kind == CONFIG_KIND:
        scn.config = Configuration.model_validate(raw)
        return
    try:
        obj = parse_object(raw)
    except UnknownKindError:
        name = (raw.get("metadata") or {}).get("name", "?")
        scn.ignored.append(f"{kind[1]}/{name}")
        return
    _add(scn, obj, where)


def from_documents(
    docs: Iterable[Mapping[str, Any] | None],
    *,
    name: str,
    base: Path,
    expand: ShapeExpander | None = None,
) -> Scenario:
    """A scenario from parsed YAML documents (None documents are skipped)."""
    scn = Scenario(name=name)
    for i, raw in enumerate(docs):
        if not raw:
            continue
        where = f"{name}: document {i + 1}"
        try:
            _add_raw(scn, raw, where, base, expand)
        except ValidationError as e:
            raise ScenarioError(f"{where}: {e}") from e
    for ns in {j.job.namespace or "default" for j in scn.jobs} | {
        q.namespace or "default" for q in scn.local_queues
    }:
        scn.namespaces.setdefault(ns, {"kubernetes.io/metadata.name": ns})
    scn.jobs.sort(key=lambda j: (j.arrival, j.seq))
    if not scn.nodes:
        raise ScenarioError(f"{name}: no Nodes and no ClusterShape: the cluster is empty")
    return scn


def load_scenario(path: Path, expand: ShapeExpander | None = None) -> Scenario:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(f"{path}: cannot read scenario: {e}") from e
    return from_documents(docs, name=path.stem, base=path.parent, expand=expand)

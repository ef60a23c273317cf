"""A simulation scenario: plain Kubernetes YAML read into `atoll.api` models.

A scenario file holds, in any order, Kueue's objects (ResourceFlavor, ClusterQueue, Cohort,
LocalQueue, WorkloadPriorityClass), PriorityClasses, Namespaces, the cluster (Nodes, or an
`atoll.dev/v1alpha1` ClusterShape, inline or by reference), an optional Kueue
`Configuration` (waitForPodsReady, fairSharing, integrations.frameworks) and the workloads:
batch/v1 Jobs, JobSets (`jobset.x-k8s.io/v1alpha2`), MPIJobs (`kubeflow.org/v2beta1`),
TrainJobs (`trainer.kubeflow.org/v1alpha1`, with the TrainingRuntimes and
ClusterTrainingRuntimes they name), LeaderWorkerSets (`leaderworkerset.x-k8s.io/v1`, one
workload per replica group, as the operator makes one Workload per group) and plain Pods,
which form pod groups by their `kueue.x-k8s.io/pod-group-name` label (a Pod without one is a
group of itself). Each says when it arrives and how long it runs with annotations
(`SCENARIO_ANNOTATIONS`; a pod group reads them from its first pod by name, each group of a
LeaderWorkerSet from the LeaderWorkerSet: a serving group runs that long, then is gone).

The sim layer cannot import the sandbox, so a ClusterShape is turned into Nodes by a
`ShapeExpander` the caller passes (the CLI passes `atoll.sandbox.shapes`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from atoll.api import v1beta1
from atoll.api.clusterqueue import ClusterQueue, not_run
from atoll.api.cohort import Cohort
from atoll.api.configuration import Configuration
from atoll.api.core import Job, Namespace, Node, Pod, PriorityClass
from atoll.api.jobset import JobSet
from atoll.api.kinds import KUEUE_KINDS, MODELS
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.localqueue import DEFAULT_LOCAL_QUEUE, LocalQueue
from atoll.api.meta import KubeObject
from atoll.api.mpijob import MPIJob
from atoll.api.priority import DEFAULT_WORKLOAD_PRIORITY_CLASS, WorkloadPriorityClass
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.topology import Topology
from atoll.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from atoll.control import jobframework as jf
from atoll.control import leaderworkerset as lws
from atoll.control import podgroups as pg
from atoll.state import tas
from atoll.state.apivalidation import Problem, check_object, model_problems

ARRIVAL = "atoll.dev/arrival"
"""Seconds from the start of the simulation when the Job is created (default 0)."""
RUN_DURATION = "atoll.dev/run-duration"
"""How long the Job runs once all its pods run, as a Go duration ("90s", "1h30m")."""
REPEAT = "atoll.dev/repeat"
"""Create this many copies of the Job, named `<name>-<k>` (default 1, at most
`MAX_REPEAT`)."""
MAX_REPEAT = 100_000
"""The most copies one Job may ask for (the simulator's benchmark runs 100,000 Jobs)."""
REPEAT_EVERY = "atoll.dev/repeat-every"
"""Arrival spacing of the copies, as a Go duration (default "0s")."""
SHAPE_FILE = "atoll.dev/shape-file"
"""On a ClusterShape document: read the shape from this file (relative to the scenario)."""
SCENARIO_ANNOTATIONS = {
    ARRIVAL: "seconds from the start when the Job is created (default 0)",
    RUN_DURATION: "run time once all pods run, a Go duration such as 90s or 1h30m",
    REPEAT: f"number of copies of the Job, named <name>-<k> (default 1, at most {MAX_REPEAT:,})",
    REPEAT_EVERY: "arrival spacing of the copies, a Go duration (default 0s)",
}
SHAPE_KIND = ("atoll.dev/v1alpha1", "ClusterShape")
CONFIG_KINDS = (
    ("config.kueue.x-k8s.io/v1beta2", "Configuration"),
    ("config.kueue.x-k8s.io/v1beta1", "Configuration"),
)
"""A Kueue Configuration document, in either version (`atoll.api.configuration`)."""

K = TypeVar("K", bound=KubeObject)
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
    """A workload of the scenario (a Job, JobSet, MPIJob, TrainJob, pod group or a
    LeaderWorkerSet's replica group) with its arrival and run time (seconds)."""

    job: KubeObject
    arrival: float
    duration: float
    seq: int
    """Position in the scenario (ties between equal arrivals)."""

    @property
    def key(self) -> str:
        """`namespace/name` of a Job; of another kind, prefixed with the kind
        (`JobSet ns/name`, `pod group ns/name`, `LeaderWorkerSet ns/name group 0`)."""
        name = f"{self.job.namespace or 'default'}/{self.job.name}"
        if isinstance(self.job, Job):
            return name
        if isinstance(self.job, lws.ReplicaGroup):
            owner = self.job.lws
            where = f"{owner.namespace or 'default'}/{owner.name}"
            return f"{owner.KIND} {where} group {self.job.index}"
        if isinstance(self.job, pg.PodGroup):
            return f"{'pod group' if self.job.grouped else 'Pod'} {name}"
        return f"{self.job.KIND} {name}"


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
    training_runtimes: list[TrainingRuntime | ClusterTrainingRuntime] = field(default_factory=list)
    """The TrainingRuntimes and ClusterTrainingRuntimes TrainJobs name (`spec.runtimeRef`)."""
    jobs: list[SimJob] = field(default_factory=list)
    config: Configuration = field(default_factory=Configuration)
    ignored: list[str] = field(default_factory=list)
    """`Kind/name` of documents the simulator does not use."""
    pods: dict[str, list[tuple[Pod, str]]] = field(default_factory=dict)
    """Pods read so far, by group key, with where each was read (made into `jobs` once the
    whole file is read)."""
    warnings: list[str] = field(default_factory=list)
    """What the simulator ignored, each naming the file and the document."""


def _job_copies(job: KubeObject, where: str, seq: int) -> list[SimJob]:
    ann = job.metadata.annotations or {}
    try:
        arrival = float(ann.get(ARRIVAL, "0"))
        deadline = None
        if isinstance(job, Job):
            tas.podset_topology_request(job.spec.template)  # conflicting annotations: an error
            deadline = job.spec.active_deadline_seconds
        if RUN_DURATION in ann:
            duration = parse_duration(ann[RUN_DURATION])
        elif deadline is not None:
            duration = float(deadline)
        else:
            raise ValueError(f"needs the annotation {RUN_DURATION} (or activeDeadlineSeconds)")
        if isinstance(job, pg.PodGroup) and REPEAT in ann:
            raise ValueError(f"{REPEAT} is for Jobs and other owner kinds, not for Pods")
        repeat = int(ann.get(REPEAT, "1"))
        every = parse_duration(ann.get(REPEAT_EVERY, "0s"))
    except ValueError as e:
        raise ScenarioError(f"{where}: {e}") from e
    if arrival < 0 or duration <= 0 or repeat < 1 or every < 0:
        raise ScenarioError(
            f"{where}: arrival and repeat-every must be >= 0, run-duration > 0, repeat >= 1"
        )
    if repeat > MAX_REPEAT:
        raise ScenarioError(
            f"{where}: metadata.annotations[{REPEAT}]: {repeat:,} copies, at most "
            f"{MAX_REPEAT:,} are allowed"
        )
    if repeat == 1:
        return [SimJob(job=job, arrival=arrival, duration=duration, seq=seq)]
    out = []
    for k in range(repeat):
        meta = job.metadata.model_copy(update={"name": f"{job.name}-{k}"})
        copy = job.model_copy(update={"metadata": meta})
        out.append(SimJob(job=copy, arrival=arrival + k * every, duration=duration, seq=seq + k))
    return out


def _webhook_check(obj: KubeObject, where: str) -> None:
    """What the operator's webhook refuses in a new object of a managed kind (its own
    check, `jf.job_create_errors`: an invalid queue name, an invalid
    `kueue.x-k8s.io/max-exec-time-seconds` label where the kind has the check)."""
    errors = jf.job_create_errors(obj)
    if errors:
        raise ScenarioError(f"{where}: {'; '.join(errors)}")


def _add(scn: Scenario, obj: KubeObject, where: str, defaults: jf.Defaults) -> None:
    match obj:
        case ResourceFlavor():
            scn.flavors.append(obj)
        case ClusterQueue():
            checks = obj.spec.admission_checks_strategy
            if checks is not None:
                names = ", ".join(r.name for r in checks.admission_checks)
                scn.warnings.append(
                    f"{where}: the simulator runs no admission checks ({names}): taken as "
                    "passed at once"
                )
                spec = obj.spec.model_copy(update={"admission_checks_strategy": None})
                obj = obj.model_copy(update={"spec": spec})
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
        case Job() | JobSet() | MPIJob() | TrainJob():
            obj = defaults.apply(_namespaced(obj))
            _webhook_check(obj, where)
            scn.jobs.extend(_job_copies(obj, where, len(scn.jobs)))
        case LeaderWorkerSet():
            obj = defaults.apply(_namespaced(obj))
            _webhook_check(obj, where)
            for copy in _job_copies(obj, where, len(scn.jobs)):
                scn.jobs.extend(_replica_groups(copy, len(scn.jobs)))
        case TrainingRuntime():
            scn.training_runtimes.append(_namespaced(obj))
        case ClusterTrainingRuntime():
            scn.training_runtimes.append(obj)
        case Pod():
            pod = defaults.apply(_namespaced(obj))
            _webhook_check(pod, where)
            error = pg.total_count_error(pod)
            if error is not None:
                raise ScenarioError(f"{where}: {error}")
            scn.pods.setdefault(pg.group_key(pod), []).append((pod, where))
        case Namespace():
            scn.namespaces[obj.name] = dict(obj.metadata.labels or {})
        case _:
            scn.ignored.append(f"{obj.KIND}/{obj.name}")
            scn.warnings.append(f"{where}: the simulator does not use {obj.KIND} objects; ignored")


def default_queues(local_queues: Iterable[LocalQueue]) -> frozenset[str]:
    """The namespaces of these LocalQueues that have one named `default`."""
    return frozenset(
        q.namespace or "default" for q in local_queues if q.name == DEFAULT_LOCAL_QUEUE
    )


def defaults_of(
    local_queues: Iterable[LocalQueue],
    workload_classes: Iterable[WorkloadPriorityClass],
    config: Configuration,
) -> jf.Defaults:
    """What the operator's webhooks would default on the scenario's objects: the default
    LocalQueue of their namespace, the WorkloadPriorityClass `default` (with its gate)."""
    queues = default_queues(local_queues)
    priority = config.priority_class_defaulting and any(
        c.name == DEFAULT_WORKLOAD_PRIORITY_CLASS for c in workload_classes
    )
    return jf.Defaults(queues.__contains__, lambda: priority)


def scenario_defaults(scn: Scenario) -> jf.Defaults:
    """`defaults_of` the scenario's LocalQueues, WorkloadPriorityClasses and Configuration."""
    return defaults_of(scn.local_queues, scn.workload_classes, scn.config)


def _raw_defaults(docs: Iterable[object]) -> jf.Defaults:
    """`defaults_of` the documents' LocalQueues, WorkloadPriorityClasses and Configuration,
    read ahead of the other objects (so that the order of the documents does not matter; an
    invalid one is reported where the documents are read in order)."""
    queues: list[LocalQueue] = []
    classes: list[WorkloadPriorityClass] = []
    config = Configuration()
    for raw in docs:
        if not isinstance(raw, Mapping):
            continue
        with contextlib.suppress(ValueError):
            if raw.get("kind") == LocalQueue.KIND:
                queues.append(LocalQueue.model_validate(raw))
            elif raw.get("kind") == WorkloadPriorityClass.KIND:
                classes.append(WorkloadPriorityClass.model_validate(raw))
            elif (str(raw.get("apiVersion", "")), str(raw.get("kind", ""))) in CONFIG_KINDS:
                config = Configuration.model_validate(raw)
    return defaults_of(queues, classes, config)


def _replica_groups(sj: SimJob, seq: int) -> list[SimJob]:
    """A LeaderWorkerSet as its replica groups, each its own gang (the operator's one
    Workload per group), all arriving and running as the LeaderWorkerSet says."""
    return [
        SimJob(job=group, arrival=sj.arrival, duration=sj.duration, seq=seq + index)
        for index, group in enumerate(gangs_of(sj.job))
    ]


def _namespaced(obj: K) -> K:
    if obj.metadata.namespace:
        return obj
    return obj.model_copy(
        update={"metadata": obj.metadata.model_copy(update={"namespace": "default"})}
    )


def _add_pod_groups(scn: Scenario) -> None:
    """Each pod group (or single Pod) of the scenario as one workload, in the order of its
    first Pod; a group must have the Pods its total count names."""
    for key, pods in scn.pods.items():
        names = [p.name for p, _ in pods]
        if len(set(names)) != len(names):
            raise ScenarioError(
                f"{pods[-1][1]}: two Pods named {key.partition('/')[0]}/"
                f"{names[-1]}: names must be unique"
            )
        group = pg.group_of(key, {p.name: p for p, _ in pods})
        assert group is not None
        where = pods[0][1]
        if group.grouped and len(pods) != group.total:
            raise ScenarioError(
                f"{where}: pod group {key}: {len(pods)} Pods, but "
                f"{pg.TOTAL_COUNT_FIELD} says {group.total}"
            )
        scn.jobs.extend(_job_copies(group, where, len(scn.jobs)))
    scn.pods.clear()


def _invalid(where: str, problems: Iterable[Problem]) -> ScenarioError:
    return ScenarioError(f"{where}: invalid: " + "; ".join(str(p) for p in problems))


def parse_document(raw: Mapping[str, Any], where: str) -> KubeObject | None:
    """One object of a scenario or Job file, checked as the API server would check it
    (Kueue kinds: schema, unknown fields and CEL rules; other kinds: their model); None for
    a kind atoll has no model for. Raises ScenarioError naming `where` and the field."""
    api_version = str(raw.get("apiVersion", ""))
    kind = str(raw.get("kind", ""))
    if api_version == v1beta1.V1BETA1:
        # Read as the API server serves it: converted to v1beta2 (`atoll.api.v1beta1`), then
        # checked; a problem names the v1beta2 field.
        try:
            raw = v1beta1.convert(raw, v1beta1.V1BETA2)
        except v1beta1.ConversionError as e:
            raise ScenarioError(f"{where}: cannot convert from {v1beta1.V1BETA1}: {e}") from None
        api_version = v1beta1.V1BETA2
        where = f"{where} (read as {v1beta1.V1BETA2})"
    model = MODELS.get((api_version, kind))
    if model is None:
        return None
    if model in KUEUE_KINDS:
        obj, problems = check_object(raw, model)
        if problems or obj is None:
            raise _invalid(where, problems)
        return obj
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise _invalid(where, model_problems(e)) from e


def _describe(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{raw.get('kind') or 'object without kind'} {name or '(no name)'}"


def _add_raw(
    scn: Scenario,
    raw: Mapping[str, Any],
    where: str,
    base: Path,
    expand: ShapeExpander | None,
    *,
    defaults: jf.Defaults,
) -> None:
    kind = (str(raw.get("apiVersion", "")), str(raw.get("kind", "")))
    if kind == SHAPE_KIND:
        if expand is None:
            raise ScenarioError(f"{where}: a ClusterShape needs a shape expander")
        for node in expand(raw, base):
            scn.nodes.append(Node.model_validate(node))
        return
    if kind in CONFIG_KINDS:
        try:
            scn.config = Configuration.model_validate(raw)
        except ValidationError as e:
            raise _invalid(where, model_problems(e)) from e
        return
    obj = parse_document(raw, where)
    if obj is None:
        name = (raw.get("metadata") or {}).get("name", "?")
        scn.ignored.append(f"{kind[1]}/{name}")
        scn.warnings.append(
            f"{where}: apiVersion {kind[0]!r} kind {kind[1]!r} is not a kind the simulator "
            "reads; ignored"
        )
        return
    _add(scn, obj, where, defaults)


def _duplicates(scn: Scenario, source: str) -> None:
    """Two objects of one kind with the same name (in one namespace) are one object to the
    API server: the second would replace the first. A scenario may not say both."""
    seen: set[tuple[str, str, str]] = set()
    groups: list[Iterable[KubeObject]] = [
        scn.flavors, scn.cluster_queues, scn.cohorts, scn.local_queues, scn.workload_classes,
        scn.priority_classes, scn.nodes, scn.topologies, scn.training_runtimes,
        [j.job for j in scn.jobs],
    ]  # fmt: skip
    for objects in groups:
        for obj in objects:
            kind, name = obj.KIND, obj.name
            if isinstance(obj, lws.ReplicaGroup):
                if obj.index:
                    continue  # its LeaderWorkerSet is checked once, by its first group
                kind, name = obj.lws.KIND, obj.lws.name
            key = (kind, obj.metadata.namespace or "", name)
            if key in seen:
                where = f"{key[1]}/{key[2]}" if key[1] else key[2]
                raise ScenarioError(
                    f"{source}: two {kind} objects named {where}: names must be unique"
                )
            seen.add(key)


def not_an_object(raw: object, where: str) -> ScenarioError:
    return ScenarioError(
        f"{where}: the top level is a {type(raw).__name__}, not a Kubernetes object (a "
        "mapping with apiVersion, kind and metadata)"
    )


def from_documents(
    docs: Iterable[object],
    *,
    name: str,
    base: Path,
    expand: ShapeExpander | None = None,
    source: str | None = None,
) -> Scenario:
    """A scenario from parsed YAML documents (empty documents are skipped); errors name
    `source` (default `name`), the document and the field."""
    scn = Scenario(name=name)
    docs = list(docs)
    defaults = _raw_defaults(docs)
    for i, raw in enumerate(docs):
        if raw is None:
            continue
        where = f"{source or name}: document {i + 1}"
        if not isinstance(raw, Mapping):
            raise not_an_object(raw, where)
        where = f"{where} ({_describe(raw)})"
        _add_raw(scn, raw, where, base, expand, defaults=defaults)
    _add_pod_groups(scn)
    _duplicates(scn, source or name)
    for cq in scn.cluster_queues:  # the Configuration may come after them
        why = not_run(cq, admission_fair_sharing=scn.config.admission_fair_sharing_enabled)
        if why is not None:
            scn.warnings.append(f"ClusterQueue {cq.name}: {why}")
    for ns in {j.job.namespace or "default" for j in scn.jobs} | {
        q.namespace or "default" for q in scn.local_queues
    }:
        scn.namespaces.setdefault(ns, {"kubernetes.io/metadata.name": ns})
    scn.jobs.sort(key=lambda j: (j.arrival, j.seq))
    if not scn.nodes:
        raise ScenarioError(f"{source or name}: no Nodes and no ClusterShape: the cluster is empty")
    return scn


def _one_line(error: Exception) -> str:
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return " ".join(str(error).split())


def load_scenario(path: Path, expand: ShapeExpander | None = None) -> Scenario:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(f"{path}: cannot read the scenario: {_one_line(e)}") from e
    return from_documents(docs, name=path.stem, base=path.parent, expand=expand, source=str(path))


def gangs_of(obj: KubeObject) -> list[KubeObject]:
    """The objects the operator makes one Workload each for: a LeaderWorkerSet's replica
    groups, else the object itself."""
    if isinstance(obj, LeaderWorkerSet):
        return [lws.group_of(obj, i, {}) for i in range(lws.replicas(obj))]
    return [obj]


WHAT_IF_KINDS = "batch/v1 Job, JobSet, MPIJob, TrainJob or LeaderWorkerSet"


def load_job(path: Path) -> KubeObject:
    """The one workload of a manifest file (for what-if), checked like a scenario's: a
    batch/v1 Job, a JobSet, an MPIJob, a TrainJob or a LeaderWorkerSet, or the Pods of one
    pod group."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(f"{path}: cannot read the Job: {_one_line(e)}") from e
    objects: list[KubeObject] = []
    for i, raw in enumerate(docs):
        where = f"{path}: document {i + 1}"
        if not isinstance(raw, Mapping):
            raise not_an_object(raw, where)
        where = f"{where} ({_describe(raw)})"
        obj = parse_document(raw, where)
        if isinstance(obj, TrainingRuntime | ClusterTrainingRuntime):
            raise ScenarioError(
                f"{where}: a TrainJob's runtime is read from the scenario (--scenario) or the "
                "cluster, not from the manifest"
            )
        if not isinstance(obj, Job | JobSet | MPIJob | TrainJob | LeaderWorkerSet | Pod):
            raise ScenarioError(f"{where}: not a {WHAT_IF_KINDS}, or a Pod")
        objects.append(_namespaced(obj))
    pods = [o for o in objects if isinstance(o, Pod)]
    if len(objects) == 1 and not pods:
        return objects[0]
    keys = {pg.group_key(p) for p in pods}
    if len(pods) != len(objects) or len(keys) != 1:
        raise ScenarioError(
            f"{path}: expected one {WHAT_IF_KINDS}, or the Pods of one pod group; found "
            f"{len(objects)} documents"
        )
    group = pg.group_of(keys.pop(), {p.name: p for p in pods})
    assert group is not None
    return group

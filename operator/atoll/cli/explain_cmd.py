"""`atoll explain [KIND] NS/NAME`: why is this Job's (JobSet's, MPIJob's, TrainJob's,
LeaderWorkerSet's, pod group's) workload pending, what would let it in, when may it start —
computed by atoll's engine on a read-only copy of a live cluster."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, Protocol

from atoll.api import labels as keys
from atoll.api.configuration import ConfigurationError
from atoll.api.meta import KubeObject
from atoll.api.workload import Workload
from atoll.cli.errors import FAILED, USAGE, complain
from atoll.cli.run_cmd import add_configuration_options, configuration
from atoll.control import jobframework as jf
from atoll.control import podgroups as pg
from atoll.control.explain import JobWhatIf, explain, what_if_workload
from atoll.engine.model import FairSharing
from atoll.kube import live
from atoll.kube.connection import KubeconfigError, check_kubeconfig
from atoll.kube.operator import fair_sharing, new_cache
from atoll.sim.scenario import gangs_of
from atoll.sim.workloads import Kinds
from atoll.state import workloads as wls
from atoll.state.cache import Cache


class Answer(Protocol):
    def describe(self) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


def print_answer(answer: Answer, *, as_json: bool) -> None:
    """An answer on stdout: text for people, or one line of JSON."""
    if as_json:
        json.dump(answer.to_json(), sys.stdout)
        print()
    else:
        print(answer.describe())


KINDS = {
    "job": "Job",
    "jobset": "JobSet",
    "mpijob": "MPIJob",
    "trainjob": "TrainJob",
    "leaderworkerset": "LeaderWorkerSet",
    "lws": "LeaderWorkerSet",
    "pod": "Pod",
    "podgroup": "Pod",
}
"""`atoll explain KIND`: the owner kind of the Workload (a pod group's Workload is named
after the group)."""
GROUPED_KINDS = ("LeaderWorkerSet",)
"""Owner kinds with one Workload per part (a LeaderWorkerSet's replica groups): each is
explained."""


def _group_index(wl: Workload) -> int:
    raw = (wl.metadata.annotations or {}).get(keys.COMPONENT_WORKLOAD_INDEX_ANNOTATION, "")
    return int(raw) if raw.isdigit() else 0


def _find_workloads(cache: Cache, target: str, kind: str = "Job") -> list[str]:
    """`NS/NAME` (or `NAME` in `default`): the Workload of the `kind` NAME (a
    LeaderWorkerSet's: one per replica group, by group index), else the Workload NAME itself
    (a pod group's). The newest Workload wins when an object has had several."""
    ns, _, name = target.rpartition("/")
    ns = ns or "default"
    owned = cache.workloads_of_job(wls.key_of(ns, name), kind=kind)
    if owned and kind in GROUPED_KINDS:
        return [wls.wl_key(w) for w in sorted(owned, key=_group_index)]
    if owned:
        newest = max(owned, key=wls.created_at)
        return [wls.wl_key(newest)]
    key = wls.key_of(ns, name)
    return [key] if key in cache.workloads else []


def read_cluster(args: argparse.Namespace) -> tuple[Cache, float, FairSharing | None]:
    """The live cluster in a cache set up by `--config`/`--set` (raises ConfigurationError
    or KubeconfigError for bad input, ClusterReadError when the cluster cannot be read)."""
    cfg = configuration(args)
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    check_kubeconfig(kubeconfig)
    cache, now = asyncio.run(live.read(kubeconfig, new_cache(cfg)))
    return cache, now, fair_sharing(cfg)


def _explain(args: argparse.Namespace) -> int:
    kind, target = "job", args.target
    if args.name is not None:
        kind, target = args.target.lower(), args.name
    if kind not in KINDS:
        return complain("explain", f"KIND {args.target!r}: one of {', '.join(KINDS)} (default job)")
    try:
        cache, now, fs = read_cluster(args)
    except (KubeconfigError, ConfigurationError) as e:
        return complain("explain", e, USAGE)
    except live.ClusterReadError as e:
        return complain("explain", e, FAILED)
    found = _find_workloads(cache, target, KINDS[kind])
    if not found:
        return complain(
            "explain",
            f"no Workload for {kind} {target!r}: neither a {KINDS[kind]} with a Workload nor "
            "a Workload of that name (is it labelled kueue.x-k8s.io/queue-name, or was it "
            "created after a LocalQueue named default in its namespace, and is its framework "
            "in integrations.frameworks?)",
            FAILED,
        )
    for key in found:  # one per Workload: a LeaderWorkerSet's replica groups
        print_answer(explain(cache, key, now, fair_sharing=fs), as_json=args.json)
    return 0


class NotQueuedError(ValueError):
    """The Job would not be queued by atoll at all."""


def live_what_if(job: KubeObject, args: argparse.Namespace) -> list[JobWhatIf]:
    """The answers for `job` (a Job, JobSet, MPIJob, TrainJob, LeaderWorkerSet or pod group)
    on the live cluster of `args`: its Workloads (a LeaderWorkerSet's, one per replica group)
    composed by the operator's adapter of its kind among those the configuration enables,
    a TrainJob's from the runtime in the cluster; one answer per Workload (raises what
    `read_cluster` raises, NotQueuedError, or jobframework.ComposeError)."""
    cache, now, fs = read_cluster(args)
    meta = job.metadata.model_copy(update={"namespace": job.metadata.namespace or "default"})
    defaults = jf.Defaults(cache.has_default_queue, cache.has_default_priority_class)
    job = pg.with_defaults(job.model_copy(update={"metadata": meta}), defaults)
    if not jf.queue_name(job):
        raise NotQueuedError(
            "it has no kueue.x-k8s.io/queue-name label and its namespace no LocalQueue "
            "named default: atoll would not queue it"
        )
    created = dt.datetime.fromtimestamp(now, dt.UTC).replace(microsecond=0)
    kinds = Kinds.of_config(configuration(args))
    workloads: list[Workload] = []
    for gang in gangs_of(job):
        wl = kinds.compose(gang, cache, created=created)
        uid = f"what-if-{len(workloads)}" if workloads else "what-if"
        meta = wl.metadata.model_copy(update={"uid": uid})
        workloads.append(wl.model_copy(update={"metadata": meta}))
    return [what_if_workload(cache, wl, now, fs, also=workloads) for wl in workloads]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="why a Job is pending, what would admit it, and when it may start (live cluster)",
        description=(
            "Reads the cluster (read-only) and runs the operator's scheduling step on a copy: "
            "the workload's queue position and the workloads ahead, its reason with numbers, "
            "what-if answers checked by the step (the quota that would admit it, the "
            "running workloads whose end would admit it, a required topology relaxed to "
            "preferred, other LocalQueues of its namespace) and a start estimate from the "
            "scheduling loop run forward with each Job's atoll.dev/run-duration annotation "
            "(else its maximumExecutionTimeSeconds or activeDeadlineSeconds; for a Workload "
            "holding a backfill reservation, saying from when it is reserved). Give the "
            "operator's --config/--set so that fair sharing and deviceClassMappings are "
            "taken into account."
        ),
    )
    p.add_argument(
        "target",
        metavar="[KIND] NS/NAME",
        help=f"the object (or Workload), namespace/name; KIND is one of {', '.join(KINDS)} "
        "(default job; a pod group's Workload is named after the group; a LeaderWorkerSet "
        "has one Workload per replica group, each explained in group order)",
    )
    p.add_argument("name", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", metavar="FILE", help="cluster to read (default: $KUBECONFIG)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the explanation as JSON (one line per Workload)",
    )
    add_configuration_options(p)
    p.set_defaults(func=_explain)

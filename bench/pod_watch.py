"""Benchmark: the operator's pod watch handler (`handlers._pods`) on a pod event stream.

    python bench/pod_watch.py [--gangs 100 --pods 8 --repeat 15 --json]
    git show main:operator/atoll/kube/handlers.py > /tmp/handlers_main.py
    python bench/pod_watch.py --compare /tmp/handlers_main.py [--gangs 20 --repeat 300]

The stream is the one a gang's pods give a watch on a KWOK cluster, each pod through:
created (Pending, unscheduled), bound by the scheduler, running (the kubelet's conditions,
IP, container statuses), a status heartbeat that changes nothing the model reads, succeeded,
its finalizer removed, marked for deletion, deleted; the pods of a gang go step by step
together, as they do on the wire. Half the gangs are a Job's pods (forgotten by name after
each event), half a pod group's (`kueue.x-k8s.io/managed`: the handler keeps their last
state and parses only what changed). Each round feeds the whole stream to a fresh watch
(new cache, new digests, new shared parts); reported: the median over `--repeat` rounds of
the handler's time per event (CPU time of the loop that calls it), with the fastest round.

`--compare FILE` times the pod handler of another version of `atoll/kube/handlers.py` (the
rest of the package as it is here) against this one, their rounds alternated (which first
flips every round), and reports each one's median and the median of this one's time over
the other's in the same pair of rounds: on a shared, busy machine the pairs see the same
load, where two runs one after the other do not.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from atoll.control.ungater import Ungater
from atoll.control.workqueue import WorkQueue
from atoll.kube import handlers
from atoll.kube.watch import Watches
from atoll.state.cache import Cache

Event = tuple[str, dict[str, Any]]
T0 = "2026-12-06T10:00:00Z"
T1 = "2026-12-06T10:00:01Z"
T2 = "2026-12-06T10:00:03Z"
T3 = "2026-12-06T10:00:13Z"


def _managed_fields(*managers: str) -> list[dict[str, Any]]:
    return [
        {
            "manager": m,
            "operation": "Update",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:status": {"f:phase": {}}},
        }
        for m in managers
    ]


def _condition(kind: str, status: str, at: str, reason: str | None = None) -> dict[str, Any]:
    c = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": at}
    if reason is not None:
        c["reason"] = reason
    return c


def _pod_steps(gang: int, index: int, *, group: bool) -> list[Event]:
    """The events of one pod of gang `gang`, in order."""
    name = f"gang-{gang}-{index}"
    owner = f"gang-{gang}"
    labels = (
        {
            "kueue.x-k8s.io/managed": "true",
            "kueue.x-k8s.io/pod-group-name": owner,
            "kueue.x-k8s.io/queue-name": "user-queue",
        }
        if group
        else {
            "batch.kubernetes.io/controller-uid": f"uid-{owner}",
            "batch.kubernetes.io/job-name": owner,
            "controller-uid": f"uid-{owner}",
            "job-name": owner,
            "batch.kubernetes.io/job-completion-index": str(index),
        }
    )
    annotations = (
        {"kueue.x-k8s.io/pod-group-total-count": "8", "kueue.x-k8s.io/role-hash": "a1b2c3d4"}
        if group
        else {"batch.kubernetes.io/job-completion-index": str(index)}
    )
    meta: dict[str, Any] = {
        "name": name,
        "generateName": f"{owner}-",
        "namespace": "team-a",
        "uid": f"uid-{name}",
        "resourceVersion": "0",
        "creationTimestamp": T0,
        "labels": labels,
        "annotations": annotations,
        "finalizers": ["kueue.x-k8s.io/managed" if group else "batch.kubernetes.io/job-tracking"],
        "managedFields": _managed_fields("kube-controller-manager"),
    }
    if not group:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "trainer",
                "image": "registry.invalid/train:1",
                "command": ["sleep", "10"],
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                    "limits": {"nvidia.com/gpu": "8"},
                },
                "volumeMounts": [
                    {
                        "name": "kube-api-access",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "nodeSelector": {"node.kubernetes.io/instance-type": "dgx-h100"},
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "volumes": [
            {
                "name": "kube-api-access",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt"}]}},
                    ],
                    "defaultMode": 420,
                },
            }
        ],
    }
    pod: dict[str, Any] = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }
    events: list[Event] = [("ADDED", pod)]

    def step(edit: Callable[[dict[str, Any]], None], kind: str = "MODIFIED") -> None:
        body = copy.deepcopy(events[-1][1])
        edit(body)
        events.append((kind, body))

    def bound(p: dict[str, Any]) -> None:
        p["spec"]["nodeName"] = f"node-{(gang * 8 + index) % 64}"
        p["status"]["conditions"] = [_condition("PodScheduled", "True", T1)]
        p["metadata"]["managedFields"] += _managed_fields("kube-scheduler")

    def running(p: dict[str, Any]) -> None:
        p["status"] |= {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": f"10.1.{gang % 250}.{index}",
            "startTime": T1,
            "conditions": [
                _condition("PodReadyToStartContainers", "True", T2),
                _condition("Initialized", "True", T1),
                _condition("Ready", "True", T2),
                _condition("ContainersReady", "True", T2),
                _condition("PodScheduled", "True", T1),
            ],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"running": {"startedAt": T2}},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.invalid/train:1",
                    "started": True,
                }
            ],
        }
        p["metadata"]["managedFields"] += _managed_fields("kwok")

    def heartbeat(p: dict[str, Any]) -> None:
        p["status"]["containerStatuses"][0]["lastState"] = {}

    def succeeded(p: dict[str, Any]) -> None:
        p["status"]["phase"] = "Succeeded"
        for c in p["status"]["conditions"]:
            if c["type"] in ("Ready", "ContainersReady", "PodReadyToStartContainers"):
                c |= {"status": "False", "lastTransitionTime": T3, "reason": "PodCompleted"}
        p["status"]["containerStatuses"][0] |= {
            "ready": False,
            "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": T3}},
        }

    def unfinalized(p: dict[str, Any]) -> None:
        p["metadata"]["finalizers"] = []

    def deleting(p: dict[str, Any]) -> None:
        p["metadata"] |= {"deletionTimestamp": T3, "deletionGracePeriodSeconds": 0}

    for edit in (bound, running, heartbeat, succeeded, unfinalized, deleting):
        step(edit)
    step(lambda _p: None, "DELETED")
    return events


def stream(gangs: int, pods: int) -> list[Event]:
    """Every gang's events, the pods of a gang step by step together, gangs one after the
    other; resourceVersions in order."""
    out: list[Event] = []
    for gang in range(gangs):
        each = [_pod_steps(gang, i, group=gang % 2 == 1) for i in range(pods)]
        for step in range(len(each[0])):
            out.extend(events[step] for events in each)
    for version, (_type, body) in enumerate(out, start=1000):
        body["metadata"]["resourceVersion"] = str(version)
    return out


def _watch(module: ModuleType = handlers) -> Callable[[str | None, Mapping[str, Any]], None]:
    """The pod handler `module` (a version of `atoll.kube.handlers`) registers, on a fresh
    cache."""
    cache = Cache()
    wiring = module.Wiring(
        cache=cache,
        wake=lambda: None,
        jobs=WorkQueue("jobs"),
        queues_changed=lambda: None,
        ungater=Ungater(cache, None, None, None),  # type: ignore[arg-type]
        pods=WorkQueue("pods"),
        seen_workload=lambda _wl: None,
        gone_workload=lambda _key: None,
    )
    watches = Watches()
    module.register_watches(watches, wiring)
    return next(w.handler for r, w in watches.watches.items() if r.plural == "pods")


def _round(events: list[Event], module: ModuleType = handlers) -> float:
    """Seconds per event (CPU time) of one round through a fresh watch."""
    on = _watch(module)
    started = time.process_time()
    for kind, body in events:
        on(kind, body)
    return (time.process_time() - started) / len(events)


def measure(events: list[Event], repeat: int) -> list[float]:
    """Seconds per event of each round."""
    return [_round(events) for _ in range(repeat)]


def _load(path: str) -> ModuleType:
    """`path` (a handlers.py) as a module beside `atoll.kube.handlers`."""
    spec = importlib.util.spec_from_file_location("atoll.kube.handlers_compared", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--compare: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compare(events: list[Event], repeat: int, other: ModuleType) -> dict[str, float]:
    """This handler's and `other`'s median µs per event, and the median ratio of the two in
    each pair of rounds."""
    this: list[float] = []
    that: list[float] = []
    for i in range(repeat):
        pair = [(this, handlers), (that, other)]
        for times, module in pair if i % 2 else reversed(pair):
            times.append(_round(events, module))
    return {
        "median_us_per_event": round(statistics.median(this) * 1e6, 2),
        "compared_median_us_per_event": round(statistics.median(that) * 1e6, 2),
        "median_ratio": round(statistics.median(a / b for a, b in zip(this, that, strict=True)), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangs", type=int, default=100)
    parser.add_argument("--pods", type=int, default=8, help="pods per gang")
    parser.add_argument("--repeat", type=int, default=15, help="rounds (a fresh watch each)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--compare", metavar="FILE", help="another handlers.py, timed against this one"
    )
    args = parser.parse_args()
    events = stream(args.gangs, args.pods)
    warm_up = events[: len(events) // 4]  # imports, interned strings
    if args.compare:
        other = _load(args.compare)
        _round(warm_up, other)
        _round(warm_up)
        compared = {"events": len(events), **compare(events, args.repeat, other)}
        print(json.dumps(compared) if args.json else _compared_text(compared))
        return 0
    measure(warm_up, 1)
    rounds = measure(events, args.repeat)
    result = {
        "events": len(events),
        "median_us_per_event": round(statistics.median(rounds) * 1e6, 2),
        "min_us_per_event": round(min(rounds) * 1e6, 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['events']} pod events, handler CPU per event: median "
            f"{result['median_us_per_event']} µs, fastest round {result['min_us_per_event']} µs"
        )
    return 0


def _compared_text(result: dict[str, Any]) -> str:
    return (
        f"{result['events']} pod events, handler CPU per event: median "
        f"{result['median_us_per_event']} µs here, {result['compared_median_us_per_event']} µs "
        f"compared; here / compared in the same pair of rounds: median {result['median_ratio']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())

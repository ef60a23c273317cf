"""The shapes of Kueue's published example manifests for the kinds atoll supports
(kubernetes-sigs/kueue `site/static/examples`: `jobs/sample-jobset.yaml`,
`jobs/sample-jobset-tas-{required,sliced,combined}.yaml`, `jobs/sample-mpijob.yaml`,
`pods-kueue/kueue-pod.yaml`, `pods-kueue/kueue-pod-group.yaml`,
`serving-workloads/sample-leaderworkerset.yaml` and `sample-leaderworkerset-tas.yaml`,
`python/sample-trainjob.py`), rewritten here in our own
words: the same kinds, fields, labels, annotations and amounts (so that what makes them
admissible or not is the same), with our own names, images and commands. Kueue's module zip
has no `site/`, so nothing is read from it or fetched at run time.

Like Kueue's, they carry no namespace (apply them with `-n`) and name the LocalQueue
`user-queue` (the TAS LeaderWorkerSet `tas-user-queue`); the TAS ones name the levels
`cloud.provider.com/topology-block` and `-rack` (examples/clusters/kueue-tas.yaml labels its
nodes so). Kueue's TrainJob example is a Kubeflow SDK script, not a manifest: `trainjob()` is
the TrainJob it submits."""

from __future__ import annotations

from typing import Any

QUEUE = {"kueue.x-k8s.io/queue-name": "user-queue"}
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
Obj = dict[str, Any]


def _sleeper(cpu: int, name: str = "nap", *, limits_only: bool = False) -> Obj:
    amounts: Obj = {"cpu": cpu, "memory": "1Gi" if limits_only else "200Mi"}
    return {
        "name": name,
        "image": "registry.invalid/examples/nap:1",
        "command": ["sleep"],
        "args": ["90s"],
        "resources": {"limits": amounts} if limits_only else {"requests": amounts},
    }


def _replicated(name: str, cpu: int, *, replicas: int | None, pods: int = 1) -> Obj:
    pod: Obj = {"spec": {"containers": [_sleeper(cpu)]}}
    rj: Obj = {
        "name": name,
        "template": {
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": pod}
        },
    }
    if replicas is not None:
        rj["replicas"] = replicas
    return rj


def jobset() -> Obj:
    """`sample-jobset.yaml`: a generated name, a network subdomain without DNS hostnames, a
    1-CPU `workers` replicated job and a 2-CPU `driver` (replicas left to the default)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"generateName": "napping-", "labels": dict(QUEUE)},
        "spec": {
            "network": {"enableDNSHostnames": False, "subdomain": "naps"},
            "replicatedJobs": [
                _replicated("workers", 1, replicas=1),
                _replicated("driver", 2, replicas=None),
            ],
        },
    }


def tas_jobset(name: str, pods: int, annotations: dict[str, str]) -> Obj:
    """The `sample-jobset-tas-*.yaml` examples: one replicated job (`workers`, 1 replica) of
    `pods` 1-CPU pods whose template carries the TAS annotations."""
    rj = _replicated("workers", 1, replicas=1, pods=pods)
    rj["template"]["spec"]["template"]["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": dict(QUEUE)},
        "spec": {"replicatedJobs": [rj]},
    }


TAS_JOBSETS = {
    # 4 pods in one rack.
    "required": tas_jobset("tas-required", 4, {"kueue.x-k8s.io/podset-required-topology": RACK}),
    # 8 pods in slices of 4, each slice in one rack.
    "sliced": tas_jobset(
        "tas-sliced",
        8,
        {
            "kueue.x-k8s.io/podset-slice-required-topology": RACK,
            "kueue.x-k8s.io/podset-slice-size": "4",
        },
    ),
    # 8 pods in one block, in slices of 4, each slice in one rack.
    "combined": tas_jobset(
        "tas-combined",
        8,
        {
            "kueue.x-k8s.io/podset-required-topology": BLOCK,
            "kueue.x-k8s.io/podset-slice-required-topology": RACK,
            "kueue.x-k8s.io/podset-slice-size": "4",
        },
    ),
}


def mpijob() -> Obj:
    """`sample-mpijob.yaml`: a launcher and 2 workers of 1 CPU and 1Gi given as limits only,
    run as a non-root user, an SSH mount path, a TTL after it finishes."""

    def replica(replicas: int, container: str, command: list[str]) -> Obj:
        c = _sleeper(1, container, limits_only=True)
        c.update(
            {"command": command[:1], "args": command[1:], "securityContext": {"runAsUser": 1000}}
        )
        return {"replicas": replicas, "template": {"spec": {"containers": [c]}}}

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "ring", "labels": dict(QUEUE)},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60},
            "sshAuthMountPath": "/home/ranks/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": replica(1, "starter", ["mpirun", "-n", "2", "/opt/ring"]),
                "Worker": replica(2, "rank", ["/usr/sbin/sshd", "-De"]),
            },
        },
    }


def pod(restart: str = "OnFailure") -> Obj:
    """`kueue-pod.yaml`: one queued 3-CPU pod with a generated name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "lone-nap-", "labels": dict(QUEUE)},
        "spec": {"restartPolicy": restart, "containers": [_sleeper(3)]},
    }


def pod_group(group: str = "pair") -> list[Obj]:
    """`kueue-pod-group.yaml`: a leader and a worker pod of 3 CPUs each, one group of 2."""
    out = []
    for role in ("leader", "worker"):
        p = pod(restart="Never")
        p["metadata"]["generateName"] = f"pair-{role}-"
        p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
        p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
        out.append(p)
    return out


def leaderworkerset(*, topology: bool = False) -> Obj:
    """`sample-leaderworkerset.yaml`: 2 replica groups of 3 pods (`size`), a leader asking for
    100m CPU and 2 workers asking for 200m each, every container exposing port 80, the set
    labelled with an app name besides the queue name. `sample-leaderworkerset-tas.yaml` is the
    same set queued to `tas-user-queue` whose leader and worker templates both require one
    rack and name the same podset group, so that each group's leader lands with its
    workers."""

    def template(role: str, cpu: str) -> Obj:
        container = {
            "name": role,
            "image": "registry.invalid/examples/web:1",
            "resources": {"requests": {"cpu": cpu}},
            "ports": [{"containerPort": 80}],
        }
        out: Obj = {"spec": {"containers": [container]}}
        if topology:
            out["metadata"] = {
                "annotations": {
                    "kueue.x-k8s.io/podset-required-topology": RACK,
                    "kueue.x-k8s.io/podset-group-name": "web-group",
                }
            }
        return out

    queue = "tas-user-queue" if topology else "user-queue"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "web",
            "labels": {"app": "web", "kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 3,
                "leaderTemplate": template("web-leader", "100m"),
                "workerTemplate": template("web-worker", "200m"),
            },
        },
    }


TRAINJOB_RUNTIME = "torch-distributed"
"""The ClusterTrainingRuntime Kueue's TrainJob example runs on (Trainer ships one of that
name; the test makes its own, a trainer step of one `node` container)."""


def trainjob(name: str = "fashion") -> Obj:
    """`python/sample-trainjob.py`: what the Kubeflow SDK creates for it, a TrainJob on the
    `torch-distributed` ClusterTrainingRuntime of 1 node with 1 CPU and 2Gi per node,
    labelled with the queue name (the SDK sets the amounts as requests and limits)."""
    per_node = {"cpu": 1, "memory": "2Gi"}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": dict(QUEUE)},
        "spec": {
            "runtimeRef": {"name": TRAINJOB_RUNTIME, "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "numNodes": 1,
                "resourcesPerNode": {"requests": dict(per_node), "limits": dict(per_node)},
            },
        },
    }

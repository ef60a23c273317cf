"""User edits of labelled Jobs on the sandbox (Kueue's Job update rules), each checked from a
pod watch: no more GPUs bound than the quota, no split gang, no pod running unadmitted beyond
what the edit itself allows. Each test prints one `[user-edit]` line with the time to recover
and the number of pods that ran unadmitted (`pytest -s` shows them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    get_json,
    is_true,
    replacing_operator,
    workload_of,
)
from tests.kube.watches import ClusterWatch, timed

pytestmark = pytest.mark.cluster
WEBHOOK_CONFIGURATION = "mutating.atoll.dev"
QUEUE_FIELD = f"metadata.labels[{b.QUEUE_LABEL}]"
RUN_DURATION = "atoll.dev/run-duration"


def _queue(cluster: KubeCluster, ns: str, gpus: int, lq: str = "q") -> None:
    rf, cq = f"rf-{ns}", f"cq-{ns}-{lq}"
    apply(cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=gpus), b.local_queue(lq, ns, cq))


def _create(cluster: KubeCluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def _running(cluster: KubeCluster, ns: str, job: str) -> int:
    pods = get_json(cluster, "get", "pods", "-n", ns, "-l", f"job-name={job}")["items"]
    return sum(
        1
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


def _admitted_running(cluster: KubeCluster, ns: str, job: str, pods: int) -> bool:
    wl = workload_of(cluster, ns, job)
    if not is_true(wl, "Admitted") or wl is None:
        return False
    count = wl["status"]["admission"]["podSetAssignments"][0]["count"]
    return bool(count == pods and _running(cluster, ns, job) == pods)


def _start(cluster: KubeCluster, ns: str, job: dict[str, Any], pods: int) -> None:
    _create(cluster, job)
    name = job["metadata"]["name"]
    cluster.wait_for(
        f"{name} admitted with {pods} pods running",
        lambda: _admitted_running(cluster, ns, name, pods),
        timeout=90,
    )


def test_queue_name_edits_on_a_running_job_are_refused(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queue(cluster, namespace, gpus=16)
    _queue(cluster, namespace, gpus=16, lq="other")
    with ClusterWatch(cluster, namespace, quota=16) as watch:
        _start(cluster, namespace, b.job("j", namespace, queue="q", pods=2, gpus=1, run="600s"), 2)
        for edit in (f"{b.QUEUE_LABEL}=other", f"{b.QUEUE_LABEL}-"):
            done = cluster.kubectl(
                "label", "job", "j", "-n", namespace, edit, "--overwrite", check=False
            )
            assert done.returncode != 0
            assert QUEUE_FIELD in done.stderr
            assert "field is immutable" in done.stderr
        job = get_json(cluster, "get", "job", "j", "-n", namespace)
        assert job["metadata"]["labels"][b.QUEUE_LABEL] == "q"
        assert _admitted_running(cluster, namespace, "j", 2)
    watch.assert_held()
    watch.report("queue-name changed/removed on a running Job (refused)", 0.0)


def test_invalid_queue_names_are_refused_at_creation(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    done = cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(b.job("bad", namespace, queue="UPPER_case", pods=1)),
        check=False,
    )
    assert done.returncode != 0
    assert f'{QUEUE_FIELD}: Invalid value: "UPPER_case"' in done.stderr
    assert "RFC 1123 subdomain" in done.stderr


def test_a_job_without_a_queue_name_goes_to_its_namespaces_default_localqueue(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's LocalQueue defaulting: once a namespace has a LocalQueue named `default`, a
    Job created there without a queue name is labelled with it by the webhook and queued
    whole; the label cannot be removed afterwards. A Job created before it runs unmanaged."""
    before = b.job("before", namespace, queue=None, pods=1, gpus=1, run="600s")
    _create(cluster, before)
    cluster.wait_for("before running", lambda: _running(cluster, namespace, "before") == 1)
    _queue(cluster, namespace, gpus=4, lq="default")
    lq = ("get", "localqueue", "default", "-n", namespace)
    cluster.wait_for("LocalQueue default active", lambda: is_true(get_json(cluster, *lq), "Active"))
    job = get_json(cluster, "get", "job", "before", "-n", namespace)
    assert b.QUEUE_LABEL not in (job["metadata"].get("labels") or {})
    assert workload_of(cluster, namespace, "before") is None
    cluster.kubectl("delete", "job", "before", "-n", namespace, "--cascade=foreground")
    with ClusterWatch(cluster, namespace, quota=4) as watch:
        _create(cluster, b.job("after", namespace, queue=None, pods=2, gpus=2, run="600s"))
        job = get_json(cluster, "get", "job", "after", "-n", namespace)
        assert job["metadata"]["labels"][b.QUEUE_LABEL] == "default"
        cluster.wait_for(
            "after admitted whole through LocalQueue default",
            lambda: _admitted_running(cluster, namespace, "after", 2),
            timeout=90,
        )
        wl = workload_of(cluster, namespace, "after")
        assert wl is not None
        assert wl["spec"]["queueName"] == "default"
        done = cluster.kubectl(
            "label", "job", "after", "-n", namespace, f"{b.QUEUE_LABEL}-", check=False
        )
        assert done.returncode != 0
        assert (
            f'{QUEUE_FIELD}: Invalid value: "": queue-name must not be empty in namespace with '
            "default queue"
        ) in done.stderr
    watch.assert_held()


def test_a_job_without_a_priority_class_gets_the_default_workloadpriorityclass(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    """Kueue's WorkloadPriorityClass defaulting with its gate on: a Job created without the
    priority-class label while a WorkloadPriorityClass `default` exists is labelled with it
    by the webhook, and its Workload has that class's priority (not its pods' 0)."""
    gate = "featureGates.WorkloadPriorityClassDefaulting=true"
    apply(cluster, b.priority_class("default", 1000))
    try:
        with replacing_operator(cluster, operator, tmp_path, "--set", gate):
            _queue(cluster, namespace, gpus=2)
            _create(cluster, b.job("plain", namespace, queue="q", pods=1, gpus=1, run="600s"))
            job = get_json(cluster, "get", "job", "plain", "-n", namespace)
            assert job["metadata"]["labels"][b.PRIORITY_LABEL] == "default"
            cluster.wait_for(
                "plain admitted", lambda: _admitted_running(cluster, namespace, "plain", 1)
            )
            wl = workload_of(cluster, namespace, "plain")
            assert wl is not None
            assert wl["spec"]["priority"] == 1000
            assert wl["spec"]["priorityClassRef"]["name"] == "default"
    finally:
        cluster.kubectl("delete", "workloadpriorityclass", "default", "--ignore-not-found")


def test_a_labelled_job_of_1_2_mib_passes_the_webhook_on_create_and_update(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queue(cluster, namespace, gpus=16)
    job = b.job("big", namespace, queue="q", pods=1, gpus=1, run="600s")
    padding = "x" * (1200 * 1024)  # within the API server's 1.5 MiB object limit
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "PAD", "value": padding}]
    _create(cluster, job)  # a 413 from the webhook would fail this
    created = get_json(cluster, "get", "job", "big", "-n", namespace)
    assert created["spec"]["suspend"] is True  # the webhook read it and suspended it
    cluster.kubectl("label", "job", "big", "-n", namespace, "team=a")  # an UPDATE review: 2.4 MiB
    cluster.wait_for(
        "big admitted and running",
        lambda: _admitted_running(cluster, namespace, "big", 1),
        timeout=90,
    )


def test_a_suspended_jobs_workload_follows_its_queue_name(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queue(cluster, namespace, gpus=0, lq="empty")
    _queue(cluster, namespace, gpus=16, lq="big")
    with ClusterWatch(cluster, namespace, quota=16) as watch:
        _create(cluster, b.job("j", namespace, queue="empty", pods=2, gpus=1, run="600s"))
        cluster.wait_for(
            "a pending Workload",
            lambda: condition(workload_of(cluster, namespace, "j"), "QuotaReserved") is not None,
        )
        cluster.kubectl(
            "label", "job", "j", "-n", namespace, f"{b.QUEUE_LABEL}=missing", "--overwrite"
        )

        def inadmissible() -> bool:
            wl = workload_of(cluster, namespace, "j") or {}
            c = condition(wl, "QuotaReserved") or {}
            return bool(
                wl.get("spec", {}).get("queueName") == "missing"
                and c.get("reason") == "Inadmissible"
                and c.get("message") == "LocalQueue missing doesn't exist"
            )

        cluster.wait_for("the Workload waiting for LocalQueue missing", inadmissible)
        cluster.kubectl("label", "job", "j", "-n", namespace, f"{b.QUEUE_LABEL}=big", "--overwrite")
        recovered = timed(
            "j admitted in big",
            cluster,
            lambda: _admitted_running(cluster, namespace, "j", 2),
            timeout=90,
        )
    watch.assert_held()
    watch.report("queue-name changed on a suspended Job (followed)", recovered)


def _parallelism(cluster: KubeCluster, ns: str, value: int) -> None:
    body = json.dumps({"spec": {"parallelism": value}})
    cluster.kubectl("patch", "job", "j", "-n", ns, "--type=merge", "-p", body)


def _raise_parallelism(cluster: KubeCluster, ns: str, *, suspend: bool) -> float:
    """Start Job j (2 of 8 completions, 2 GPUs a pod) in an 8-GPU queue, raise its
    parallelism to 4; returns the seconds until it runs 4 pods admitted."""
    job = b.job("j", ns, queue="q", pods=2, gpus=2, run="600s")
    job["spec"]["completions"] = 8
    job["spec"]["suspend"] = suspend
    _start(cluster, ns, job, 2)
    _parallelism(cluster, ns, 4)
    return timed(
        "j readmitted with 4 pods",
        cluster,
        lambda: _admitted_running(cluster, ns, "j", 4),
        timeout=120,
    )


def test_raising_parallelism_of_an_admitted_job_rebuilds_its_workload(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queue(cluster, namespace, gpus=8)
    with ClusterWatch(cluster, namespace, quota=8) as watch:
        recovered = _raise_parallelism(cluster, namespace, suspend=False)
        _parallelism(cluster, namespace, 8)

        def waits_for_quota() -> bool:
            wl = workload_of(cluster, namespace, "j") or {}
            return bool(
                wl.get("spec", {}).get("podSets", [{}])[0].get("count") == 8
                and not is_true(wl, "QuotaReserved")
                and _running(cluster, namespace, "j") == 0
            )

        cluster.wait_for("j rebuilt for 8 pods, over its quota", waits_for_quota, timeout=120)
    watch.assert_held()
    assert watch.seen.max_gpus == 8
    watch.report("parallelism raised 2->4 on an admitted Job (stopped, rebuilt)", recovered)


@pytest.fixture
def no_webhook(cluster: KubeCluster, operator: OperatorProcess) -> Iterator[None]:
    """The webhook bypassed: its configuration deleted and the operator run with
    `--webhook off` (a replica serving the webhook would create it again within a second);
    after the test the operator runs as before and creates it again."""
    operator.stop()
    cluster.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION)
    extra = operator.extra
    operator.extra = (*extra, "--webhook", "off")
    operator.start()
    yield
    operator.stop()
    operator.extra = extra
    operator.start()


def test_with_the_webhook_bypassed_the_reconciler_enforces_the_rules(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, no_webhook: None
) -> None:
    _queue(cluster, namespace, gpus=4)
    with ClusterWatch(cluster, namespace, quota=4) as watch:
        bad = b.job("bad", namespace, queue="UPPER_case", pods=1, gpus=1, run="600s")
        bad["spec"]["suspend"] = True
        _create(cluster, bad)

        def warned() -> bool:
            events = get_json(
                cluster,
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                "involvedObject.name=bad",
            )["items"]
            return any(
                e["type"] == "Warning" and QUEUE_FIELD in e.get("message", "") for e in events
            )

        cluster.wait_for("a Warning event naming the queue-name label", warned)
        assert workload_of(cluster, namespace, "bad") is None
        a, bee = (b.job(n, namespace, queue="q", pods=2, gpus=2, run="600s") for n in "ab")
        a["spec"]["suspend"] = bee["spec"]["suspend"] = True  # as without a webhook
        _start(cluster, namespace, a, 2)
        _create(cluster, bee)
        cluster.wait_for(
            "b pending", lambda: condition(workload_of(cluster, namespace, "b"), "QuotaReserved")
        )
        cluster.kubectl("label", "job", "a", "-n", namespace, f"{b.QUEUE_LABEL}-")
        recovered = timed(
            "a stopped, its Workload gone and b admitted",
            cluster,
            lambda: (
                workload_of(cluster, namespace, "a") is None
                and _running(cluster, namespace, "a") == 0
                and _admitted_running(cluster, namespace, "b", 2)
            ),
            timeout=120,
        )
        assert get_json(cluster, "get", "job", "a", "-n", namespace)["spec"]["suspend"] is True
    watch.assert_held()
    watch.report("queue-name label removed from a running Job, webhook bypassed", recovered)


def _gang_pods(cluster: KubeCluster, ns: str, job: str) -> list[dict[str, Any]]:
    pods = get_json(cluster, "get", "pods", "-n", ns, "-l", f"job-name={job}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _gated(pod: dict[str, Any]) -> bool:
    return any(
        g["name"] == "kueue.x-k8s.io/topology" for g in pod["spec"].get("schedulingGates") or []
    )


def _gang_state(cluster: KubeCluster, ns: str, job: str, racks: dict[str, str | None]) -> str:
    """The Job's pods (phase, node and rack, gates, nodeSelector) and its Workload's
    conditions and admission, for a failure message."""
    lines = []
    pods = get_json(cluster, "get", "pods", "-n", ns, "-l", f"job-name={job}")["items"]
    for p in sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"]):
        node = p["spec"].get("nodeName")
        gates = [g["name"] for g in p["spec"].get("schedulingGates") or []]
        ended = [
            (c.get("state") or {}).get("terminated", {}).get("finishedAt")
            for c in p["status"].get("containerStatuses") or []
        ]
        lines.append(
            f"pod {p['metadata']['name']}: {p['status'].get('phase')}"
            f"{' deleting' if p['metadata'].get('deletionTimestamp') else ''}"
            f" node={node} rack={racks.get(node or '')} gates={gates}"
            f" nodeSelector={p['spec'].get('nodeSelector')}"
            f" started={p['status'].get('startTime')} finished={ended[0] if ended else None}"
        )
    wl = workload_of(cluster, ns, job) or {}
    status = wl.get("status") or {}
    for c in status.get("conditions") or []:
        lines.append(
            f"workload {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
            f" ({c.get('lastTransitionTime')})"
        )
    lines.append(f"workload admission: {json.dumps(status.get('admission'))}")
    lines.append(f"workload requeueState: {status.get('requeueState')}")
    return "\n".join(lines)


HELD = "1h"
"""The run time of pods that run until the test ends them (`_end`)."""


def _end(cluster: KubeCluster, ns: str, pods: list[str]) -> None:
    """End running pods of a Job one second from now: KWOK counts a pod's run time from the
    pod's last change, so a new `atoll.dev/run-duration` starts it again."""
    for name in pods:
        cluster.kubectl("annotate", "pod", name, "-n", ns, f"{RUN_DURATION}=1s", "--overwrite")


@pytest.mark.parametrize("outside", [False, True], ids=["where-the-scheduler-puts-them", "outside"])
def test_pods_ungated_by_hand_never_split_a_gang(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str], outside: bool
) -> None:
    topo, rf = b.dgx_topology(namespace)
    cq = f"cq-{namespace}"
    apply(cluster, topo, rf, b.cluster_queue(cq, rf["metadata"]["name"], gpus=128))
    apply(cluster, b.local_queue("q", namespace, cq))
    # Two waves of four 8-GPU pods in one rack: the second wave is created gated while the
    # operator is down, and a user removes the gate of two of its pods by hand. Every pod runs
    # until the test ends it: the first wave once the operator is down, the second once it is
    # bound whole. With a fixed run time, the pods ungated by hand could finish before the
    # operator is back (its restart takes as long as the machine makes it): it would then
    # see two pods to ungate, not a gang split by hand, and the wave would never be whole.
    job = b.job("ring", namespace, queue="q", pods=4, gpus=8, run=HELD, required_topology=b.RACK)
    job["spec"]["completions"] = 8
    racks = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(b.RACK)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    with ClusterWatch(cluster, namespace, quota=128) as watch:
        _start(cluster, namespace, job, 4)
        wave = _gang_pods(cluster, namespace, "ring")
        first = {p["metadata"]["name"] for p in wave}
        rack = racks[wave[0]["spec"]["nodeName"]]
        elsewhere = [n for n in dgx if racks[n] != rack]
        operator.kill()
        try:
            _end(cluster, namespace, sorted(first))
            cluster.wait_for(
                "the second wave, gated",
                lambda: sum(_gated(p) for p in _gang_pods(cluster, namespace, "ring")) == 4,
            )
            by_hand = [
                p["metadata"]["name"] for p in _gang_pods(cluster, namespace, "ring") if _gated(p)
            ][:2]
            for name, node in zip(by_hand, elsewhere, strict=False):
                ops: list[dict[str, Any]] = [{"op": "remove", "path": "/spec/schedulingGates"}]
                if outside:  # pinned by hand to nodes of another rack
                    path = "/spec/nodeSelector/kubernetes.io~1hostname"
                    ops.insert(0, {"op": "add", "path": path, "value": node})
                cluster.kubectl(
                    "patch", "pod", name, "-n", namespace, "--type=json", "-p", json.dumps(ops)
                )
            cluster.wait_for(
                "the pods ungated by hand bound",
                lambda: all(
                    p["spec"].get("nodeName")
                    for p in _gang_pods(cluster, namespace, "ring")
                    if p["metadata"]["name"] in by_hand
                ),
            )
        finally:
            operator.start()

        def live() -> list[dict[str, Any]]:
            pods = _gang_pods(cluster, namespace, "ring")
            return [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]

        def whole() -> bool:
            pods = live()
            nodes = [p["spec"].get("nodeName") for p in pods if not _gated(p)]
            return len(pods) == 4 and len(nodes) == 4 and all(nodes)

        try:
            recovered = timed("the second wave bound whole", cluster, whole, 120)
        except AssertionError as e:
            state = _gang_state(cluster, namespace, "ring", racks)
            raise AssertionError(f"{e}\n{state}\noperator log:\n{operator.tail(40)}") from e
        second_wave = [p["metadata"]["name"] for p in live()]
        assert not first & set(second_wave)
        _end(cluster, namespace, second_wave)

        def done() -> bool:
            j = get_json(cluster, "get", "job", "ring", "-n", namespace)
            return bool(j["status"].get("succeeded") == 8)

        cluster.wait_for("the Job complete", done, timeout=120)
    watch.assert_held()
    pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", "job-name=ring")["items"]
    succeeded = [p for p in pods if p["status"].get("phase") == "Succeeded"]
    second = [p for p in succeeded if p["metadata"]["name"] not in first]
    assert len(second) == 4
    assert len({racks[p["spec"]["nodeName"]] for p in second}) == 1  # the gang ran whole
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    evicted = any(e["reason"] == "EvictedDueToPodOutsideTopologyAssignment" for e in events)
    assert evicted or not outside
    how = "evicted whole and readmitted" if evicted else "counted where bound, rest pinned"
    watch.report(f"topology gate removed by hand from 2 pods ({how})", recovered)


def test_with_the_webhook_bypassed_a_raised_parallelism_is_stopped_by_the_reconciler(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, no_webhook: None
) -> None:
    _queue(cluster, namespace, gpus=8)
    with ClusterWatch(cluster, namespace, quota=8) as watch:
        recovered = _raise_parallelism(cluster, namespace, suspend=True)  # no webhook suspends
    # Without the webhook the Job controller starts the two extra pods before the reconciler
    # stops the Job: at most those ran unadmitted.
    watch.assert_held(unadmitted=2)
    watch.report("parallelism raised 2->4, webhook bypassed (stopped by the reconciler)", recovered)

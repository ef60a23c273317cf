"""TrainJobs (with the runtimes they name) and LeaderWorkerSets in the simulator and what-if:
composed by the operator's adapters, a TrainJob from its runtime with its own overrides, a
LeaderWorkerSet as one gang per replica group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.engine import decisions as d
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from atoll.sim.results import JobState
from atoll.sim.scenario import ScenarioError
from atoll.sim.whatif import what_ifs
from tests.sim import builders as b
from tests.sim.test_kinds import _config, _container, _records, _timing, load_job_doc
from tests.sim.test_output import EXAMPLES, _cli, _simulate

FRAMEWORKS = [
    "batch/job",
    "trainer.kubeflow.org/trainjob",
    "leaderworkerset.x-k8s.io/leaderworkerset",
]
Doc = dict[str, Any]


def _config_all() -> Doc:
    return _config(FRAMEWORKS)


def runtime(name: str = "torch", *, namespace: str | None = None, num_nodes: int = 1) -> Doc:
    """A training runtime of an initializer (no GPU) and the trainer step (1 GPU a node)."""

    def rj(job: str, step: str, gpus: int) -> Doc:
        return {
            "name": job,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
                "spec": {
                    "template": {"spec": {"containers": [{**_container(gpus), "name": "node"}]}}
                },
            },
        }

    meta: Doc = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime" if namespace is not None else "ClusterTrainingRuntime",
        "metadata": meta,
        "spec": {
            "mlPolicy": {"numNodes": num_nodes},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        rj("dataset-initializer", "dataset-initializer", 0),
                        rj("node", "trainer", 1),
                    ]
                }
            },
        },
    }


def trainjob(
    name: str,
    *,
    nodes: int = 2,
    gpus: int = 2,
    runtime_ref: Doc | None = None,
    overrides: list[Doc] | None = None,
    arrival: float = 0,
) -> Doc:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": _timing(arrival, "10m"),
        },
        "spec": {
            "runtimeRef": runtime_ref or {"name": "torch"},
            "trainer": {
                "numNodes": nodes,
                "resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}},
            },
            "podSpecOverrides": overrides or [],
        },
    }


def lws(name: str, *, replicas: int = 2, size: int = 2, gpus: int = 1, leader: bool = True) -> Doc:
    template = {"spec": {"containers": [_container(gpus)]}}
    lwt: Doc = {"size": size, "workerTemplate": template}
    if leader:
        lwt["leaderTemplate"] = {"spec": {"containers": [_container(0)]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": _timing(0, "10m"),
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }


def test_a_trainjob_is_one_gang_of_its_runtimes_jobs() -> None:
    got = _records(runtime(), trainjob("llm", nodes=3, gpus=2), config=_config_all())
    rec = got["TrainJob default/llm"]
    # 1 initializer pod (no GPU) + 3 nodes × 2 GPUs (resourcesPerNode), admitted together
    assert (rec.pods, rec.gpus, rec.admitted, rec.state) == (4, 6, 0, JobState.FINISHED)


def test_a_trainjob_without_its_runtime_gets_no_workload_and_a_note_naming_runtime_ref() -> None:
    got = _records(trainjob("lost", runtime_ref={"name": "gone"}), config=_config_all())
    rec = got["TrainJob default/lost"]
    assert rec.admitted is None
    assert rec.reason == "ErrWorkloadCompose"
    assert "spec.runtimeRef: ClusterTrainingRuntime 'gone' not found" in (rec.message or "")
    assert any("spec.runtimeRef" in n for n in got["notes"])


def test_a_namespaced_runtime_is_found_in_the_trainjobs_namespace() -> None:
    ref = {"name": "mine", "kind": "TrainingRuntime"}
    got = _records(
        runtime("mine", namespace="default", num_nodes=1),
        trainjob("llm", nodes=2, runtime_ref=ref),
        config=_config_all(),
    )
    assert got["TrainJob default/llm"].pods == 3


def test_the_trainjobs_own_override_reaches_its_pods_placement() -> None:
    nowhere = [{"targetJobs": [{"name": "node"}], "nodeSelector": {"zone": "nowhere"}}]
    scn = b.scenario(
        _config_all(), b.nodes(4, 2), b.flavor(), b.cluster_queue(gpus=8), b.local_queue(),
        runtime(), trainjob("pinned", nodes=1, overrides=nowhere),
    )  # fmt: skip
    sim = GangSimulator(scn, Settings.of(scn.config))
    wl = sim.kinds.compose(scn.jobs[0].job, sim.cache, created=0.0)
    _, node = wl.spec.pod_sets
    assert node.template.spec.node_selector == {"zone": "nowhere"}
    result = GangSimulator(scn, Settings.of(scn.config, until=3600)).run()
    (rec,) = result.jobs
    assert rec.started is None  # admitted by quota, but no node has zone=nowhere
    assert rec.evictions >= 1


def test_a_scenario_refuses_what_the_webhook_refuses_in_each_kind() -> None:
    """One rule (`jf.job_create_errors`) for the webhook and the scenario reader: a bad
    max-exec-time label is refused in a TrainJob, not in a LeaderWorkerSet (Kueue's webhook
    for it does not check the label); a bad queue name is refused in both."""
    label = "kueue.x-k8s.io/max-exec-time-seconds"
    base = (_config_all(), b.nodes(4, 2), b.flavor(), b.cluster_queue(gpus=8), b.local_queue())
    bad_tj = trainjob("tj", nodes=1)
    bad_tj["metadata"]["labels"][label] = "0"
    with pytest.raises(ScenarioError, match="max-exec-time-seconds"):
        b.scenario(*base, runtime(), bad_tj)
    group = lws("serve")
    group["metadata"]["labels"][label] = "0"
    assert len(b.scenario(*base, group).jobs) == 2
    for obj in (lws("serve"), trainjob("tj", nodes=1)):
        obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "Not_A_Name"
        with pytest.raises(ScenarioError, match="queue-name"):
            b.scenario(*base, runtime(), obj)


def test_each_replica_group_of_a_leaderworkerset_is_its_own_gang() -> None:
    # 2 groups of a leader (no GPU) + 2 workers × 1 GPU; the quota holds one group at a time
    got = _records(lws("serve", replicas=2, size=3, gpus=1), gpus=3, config=_config_all())
    groups = [got[f"LeaderWorkerSet default/serve group {i}"] for i in (0, 1)]
    assert [(g.pods, g.gpus) for g in groups] == [(3, 2), (3, 2)]
    first, second = sorted(groups, key=lambda g: g.admitted or 0.0)
    assert first.admitted == 0
    # whole groups: never 1 of its 2 GPUs early (parked, then woken by the release of what
    # it lacked)
    assert second.admitted == first.finished


def test_a_leaderworkerset_needs_its_own_framework_not_the_pod_one() -> None:
    got = _records(lws("serve"), config=_config(["batch/job", "pod"]))
    assert not any(k.startswith("LeaderWorkerSet") for k in got if k != "notes")
    assert any("leaderworkerset.x-k8s.io/leaderworkerset framework" in n for n in got["notes"])


def test_two_leaderworkersets_of_one_name_are_refused() -> None:
    with pytest.raises(ScenarioError, match="two LeaderWorkerSet objects named default/serve"):
        b.scenario(b.nodes(1, 2), b.flavor(), b.cluster_queue(), lws("serve"), lws("serve"))


def test_what_if_answers_for_each_group_and_a_trainjob_from_the_scenarios_runtime(
    tmp_path: Path,
) -> None:
    scn = b.scenario(
        _config_all(), b.nodes(4, 2), b.flavor(), b.cluster_queue(gpus=4), b.local_queue(),
        runtime(),
    )  # fmt: skip
    answers = what_ifs(scn, load_job_doc(lws("serve", size=3, gpus=1), tmp_path))
    assert sorted(a.job.rsplit("-", 2)[1] for a in answers) == ["0", "1"]  # group indexes
    # one head per ClusterQueue a step: one group is admitted now, the other waits behind it
    (head,) = [a for a in answers if isinstance(a.decision, d.Admit)]
    (behind,) = [a for a in answers if a is not head]
    assert isinstance(head.decision, d.Admit)
    assert [str(p.name) for p in head.decision.pod_sets] == ["leader", "worker"]
    assert behind.ahead == (head.job,)
    assert isinstance(behind.at_head, d.Admit)  # at the head it would fit beside it
    (answer,) = what_ifs(scn, load_job_doc(trainjob("llm", nodes=2, gpus=2), tmp_path))
    assert isinstance(answer.decision, d.Admit)
    assert [str(p.name) for p in answer.decision.pod_sets] == ["dataset-initializer", "node"]
    with pytest.raises(ScenarioError, match="not found"):
        what_ifs(scn, load_job_doc(trainjob("lost", runtime_ref={"name": "gone"}), tmp_path))
    with pytest.raises(ScenarioError, match="runtime is read from the scenario"):
        load_job_doc(runtime(), tmp_path)


def test_greedy_runs_trainjobs_and_each_leaderworkerset_group() -> None:
    scn = b.scenario(
        _config_all(), b.nodes(4, 2), b.flavor(), b.cluster_queue(), b.local_queue(),
        runtime(), trainjob("llm", nodes=2, gpus=2), lws("serve", replicas=2, size=2),
    )  # fmt: skip
    recs = {r.name: r for r in GreedySimulator(scn).run().jobs}
    assert recs["TrainJob default/llm"].pods == 3
    assert recs["LeaderWorkerSet default/serve group 1"].gpus == 1
    assert all(r.state == JobState.FINISHED for r in recs.values())


def test_the_kinds_example_runs_every_kind_whole_and_compares(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _simulate(str(EXAMPLES / "kinds.yaml"), "--compare", "--json") == 0
    gang, greedy = json.loads(capsys.readouterr().out)["runs"]
    jobs = {j["name"]: j for j in gang["jobs"]}
    finetune = jobs["TrainJob default/finetune"]
    assert (finetune["pods"], finetune["gpus"], finetune["state"]) == (2, 16, "Finished")
    for i in (0, 1):  # each replica group: a leader and a 4-GPU worker, a gang of its own
        group = jobs[f"LeaderWorkerSet default/serve group {i}"]
        assert (group["pods"], group["gpus"], group["state"]) == (2, 4, "Finished")
    assert jobs["JobSet default/too-big"]["state"] == "Pending"
    assert gang["summary"]["finished"] == len(jobs) - 1
    assert {j["name"] for j in greedy["jobs"]} == set(jobs)


def test_what_if_prints_one_answer_per_replica_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "serve.yaml"
    serve = lws("probe", replicas=3, size=2)
    serve["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
    manifest.write_text(yaml.safe_dump(serve))
    scenario = str(EXAMPLES / "kinds.yaml")
    assert _cli("what-if", str(manifest), "--scenario", scenario, "--json") == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["job"].rsplit("-", 2)[1] for a in answers] == ["0", "1", "2"]
    assert {a["clusterQueue"] for a in answers} == {"training"}

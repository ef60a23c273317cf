"""Reading scenarios: durations, Job annotations, shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.cli.simulate_cmd import read_scenario
from atoll.sim.gang import Settings
from atoll.sim.scenario import ScenarioError, parse_duration
from tests.sim import builders as b
from tests.sim.builders import cluster_queue, flavor, job, nodes, six_gpus


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param("1.5h", 5400.0, id="fraction"),
        pytest.param("250ms", 0.25, id="millis"),
        pytest.param("0", 0.0, id="zero"),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "1x", "h", "1h 2m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_repeat_makes_named_copies_spaced_in_time() -> None:
    scn = six_gpus(job("sweep", **{"atoll.dev/repeat": "3", "atoll.dev/repeat-every": "1m"}))
    assert [(j.key, j.arrival) for j in scn.jobs] == [
        ("default/sweep-0", 0.0),
        ("default/sweep-1", 60.0),
        ("default/sweep-2", 120.0),
    ]


def test_jobs_are_ordered_by_arrival() -> None:
    scn = six_gpus(job("late", arrival=50), job("early", arrival=5))
    assert [j.key for j in scn.jobs] == ["default/early", "default/late"]


def test_job_without_run_duration_is_an_error() -> None:
    bad = job("j")
    del bad["metadata"]["annotations"]["atoll.dev/run-duration"]
    with pytest.raises(ScenarioError, match=r"atoll\.dev/run-duration"):
        six_gpus(bad)


@pytest.mark.parametrize("raw", ["0", "-5", "1h"])
def test_a_max_exec_time_label_the_webhook_refuses_is_an_error(raw: str) -> None:
    """As the operator's webhook (and Kueue's) refuses such a Job at creation; a valid one
    is the Workload's limit."""
    bad = job("j")
    bad["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = raw
    with pytest.raises(ScenarioError, match=rf'max-exec-time-seconds\]: Invalid value: "{raw}"'):
        six_gpus(bad)
    ok = job("j")
    ok["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "600"
    assert [j.key for j in six_gpus(ok).jobs] == ["default/j"]


def test_inline_cluster_shape(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "apiVersion: atoll.dev/v1alpha1\nkind: ClusterShape\nmetadata: {name: s}\n"
        "spec:\n  nodeGroups:\n  - {name: n, count: 2, gpus: {count: 4}}\n"
    )
    scn = read_scenario(path)
    assert [n.name for n in scn.nodes] == ["n-0", "n-1"]
    assert scn.nodes[0].status.allocatable is not None
    assert str(scn.nodes[0].status.allocatable["nvidia.com/gpu"]) == "4"


def test_kueue_configuration_sets_the_simulator_settings() -> None:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": {
            "timeout": "5m",
            "requeuingStrategy": {"backoffBaseSeconds": 10, "backoffLimitCount": 2},
        },
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]},
    }
    settings = Settings.of(six_gpus(config).config)
    assert settings.timeout == 300.0
    assert (settings.backoff_base, settings.backoff_limit) == (10.0, 2)
    assert settings.fair_sharing is not None


def test_unknown_kinds_are_listed_not_fatal() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert six_gpus(cm).ignored == ["ConfigMap/x"]


def _cq(**spec: object) -> dict[str, object]:
    cq = cluster_queue()
    cq["spec"].update(spec)
    return cq


def _first_quota(cq: dict[str, Any], **fields: object) -> dict[str, Any]:
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1].update(fields)
    return cq


QUOTA = "spec.resourceGroups[0].flavors[0].resources[2]"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            {**_cq(cohort="team", bogus=1), "apiVersion": "kueue.x-k8s.io/v1beta1"},
            "document 1 (ClusterQueue cq) (read as kueue.x-k8s.io/v1beta2): invalid: "
            "spec.bogus: unknown field",
            id="v1beta1-checked-after-conversion",
        ),
        pytest.param(
            _cq(cohortname="team"),
            "document 1 (ClusterQueue cq): invalid: spec.cohortname: unknown field",
            id="unknown-field",
        ),
        pytest.param(
            _first_quota(cluster_queue(), nominalQuota=-2),
            f"invalid: {QUOTA}.nominalQuota: nominalQuota must be non-negative",
            id="negative-quota",
        ),
        pytest.param(
            _first_quota(cluster_queue(), borrowingLimit=2),
            "invalid: spec.resourceGroups: borrowingLimit must be nil when cohort is empty",
            id="borrowing-limit-without-cohort",
        ),
        pytest.param(
            _cq(queueingStrategy="FIFO"),
            "invalid: spec.queueingStrategy: Input should be 'StrictFIFO' or 'BestEffortFIFO'",
            id="enum",
        ),
        pytest.param(
            job("j", **{"atoll.dev/repeat": "100001"}),
            "document 1 (Job j): metadata.annotations[atoll.dev/repeat]: 100,001 copies, at "
            "most 100,000 are allowed",
            id="repeat-bounded",
        ),
    ],
)
def test_objects_are_checked_as_the_api_server_checks_them(
    tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump_all([doc, *nodes(1, 2)]))
    with pytest.raises(ScenarioError) as err:
        read_scenario(path)
    assert str(err.value).startswith(f"{path}: document 1 (")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ScenarioError, match="two ClusterQueue objects named cq: names must"):
        six_gpus(cluster_queue())
    with pytest.raises(ScenarioError, match="two Job objects named default/a"):
        six_gpus(job("a"), job("a"))
    sweep = job("a", **{"atoll.dev/repeat": "2"})
    with pytest.raises(ScenarioError, match="two Job objects named default/a-1"):
        six_gpus(sweep, job("a-1"))


def test_a_v1beta1_scenario_is_read_as_the_api_server_serves_it() -> None:
    """Kueue's v1beta1 queue objects simulate as their v1beta2 form (the same `convert` as
    the operator's conversion webhook): the cohort, the admission check list and the
    fungibility value Borrow become cohortName, a strategy and MayStopSearch."""
    cq = {
        **_cq(
            cohort="team", admissionChecks=["prov"], flavorFungibility={"whenCanBorrow": "Borrow"}
        ),
        "apiVersion": "kueue.x-k8s.io/v1beta1",
    }
    rf = {**flavor(), "apiVersion": "kueue.x-k8s.io/v1beta1"}
    scn = b.scenario(nodes(1, 2), rf, cq)
    (queue,) = scn.cluster_queues
    assert queue.spec.cohort_name == "team"
    assert any("runs no admission checks (prov)" in w for w in scn.warnings)
    assert queue.spec.flavor_fungibility.when_can_borrow == "MayStopSearch"
    assert [f.name for f in scn.flavors] == ["gpu"]


def test_a_v1beta1_configuration_in_a_scenario_is_read_as_the_operator_reads_it() -> None:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "fairSharing": {"enable": True},
    }
    scn = b.scenario(nodes(1, 2), flavor(), cluster_queue(), config)
    assert scn.config is not None
    assert scn.config.fair_sharing is not None
    assert not scn.config.wait_for_pods_ready_enabled


def test_a_document_that_is_not_a_mapping_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ScenarioError) as err:
        read_scenario(path)
    assert str(err.value) == (
        f"{path}: document 1: the top level is a list, not a Kubernetes object (a mapping "
        "with apiVersion, kind and metadata)"
    )


def test_unknown_kinds_are_a_warning_naming_the_document() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "ac"},
        "spec": {"controllerName": "example.com/check"},
    }
    scn = six_gpus(cm, check)
    assert scn.warnings == [
        "test: document 9 (ConfigMap x): apiVersion 'v1' kind 'ConfigMap' is not a kind the "
        "simulator reads; ignored",
        "test: document 10 (AdmissionCheck ac): the simulator does not use AdmissionCheck "
        "objects; ignored",
    ]


def test_what_the_simulator_does_not_run_on_a_clusterqueue_is_a_warning() -> None:
    """Admission checks are taken as passed at once (the ClusterQueue admits as without
    them); an admission scope without the Configuration's `admissionFairSharing` has no
    effect (as in Kueue): the queue orders by priority and time. With it, no warning."""
    cq = cluster_queue(
        admissionChecksStrategy={"admissionChecks": [{"name": "prov"}]},
        admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"},
    )
    scn = b.scenario(nodes(1, 2), flavor(), cq)
    assert scn.warnings == [
        "test: document 3 (ClusterQueue cq): the simulator runs no admission checks (prov): "
        "taken as passed at once",
        "ClusterQueue cq: admissionScope UsageBasedAdmissionFairSharing has no effect: the "
        "Configuration has no admissionFairSharing (or the AdmissionFairSharing gate is off), "
        "so its Workloads are ordered by priority and creation time, as Kueue does then",
    ]
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "admissionFairSharing": {"usageHalfLifeTime": "10m"},
    }
    configured = b.scenario(nodes(1, 2), flavor(), cq, config)
    assert not any("admissionScope" in w for w in configured.warnings)
    gated = {**config, "featureGates": {"AdmissionFairSharing": False}}
    assert any("admissionScope" in w for w in b.scenario(nodes(1, 2), flavor(), cq, gated).warnings)
    (queue,) = scn.cluster_queues
    assert queue.spec.admission_checks_strategy is None

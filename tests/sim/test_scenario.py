"""Reading scenarios: durations, Job annotations, shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from atoll.cli.simulate_cmd import read_scenario
from atoll.sim.gang import Settings
from atoll.sim.scenario import ScenarioError, parse_duration
from tests.sim.builders import job, six_gpus


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

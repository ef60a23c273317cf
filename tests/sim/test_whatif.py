"""What-if: the engine's answer for one more Job at a point of a scenario."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.core import Job
from atoll.api.localqueue import LocalQueue
from atoll.engine import decisions as d
from atoll.sim.scenario import ScenarioError
from atoll.sim.whatif import what_if
from tests.sim.builders import job, local_queue, six_gpus, wl_key

PREEMPTING = {"preemption": {"withinClusterQueue": "LowerPriority"}}


def _job(name: str, **kw: Any) -> Job:
    return Job.model_validate(job(name, **kw))


def test_fits_now_with_its_flavor() -> None:
    answer = what_if(six_gpus(job("a", pods=2)), _job("new", pods=4), at=10)
    assert isinstance(answer.decision, d.Admit)
    assert answer.decision.pod_sets[0].flavors[-1] == ("nvidia.com/gpu", "gpu")
    assert answer.pods_fit is True
    assert "admitted with" in answer.describe()


def test_names_the_victims_it_would_preempt() -> None:
    scn = six_gpus(job("low", pods=4, priority="low"), **PREEMPTING)
    answer = what_if(scn, _job("vip", pods=4, priority="high"), at=60)
    assert isinstance(answer.decision, d.Preempt)
    assert [v.workload for v in answer.decision.victims] == [wl_key("low")]
    assert answer.to_json()["decision"]["victims"] == [
        {"workload": wl_key("low"), "reason": "InClusterQueue"}
    ]


def test_pending_with_the_reason_and_numbers() -> None:
    answer = what_if(six_gpus(job("a", pods=4)), _job("new", pods=4), at=60)
    assert isinstance(answer.decision, d.Pending)
    assert answer.decision.reason is d.PendingReason.WAITING_FOR_QUOTA
    assert answer.to_json()["decision"]["kind"] == "Pending"


def test_quota_fits_but_pods_do_not() -> None:
    answer = what_if(six_gpus(), _job("wide", pods=1, gpus=4))
    assert isinstance(answer.decision, d.Admit)
    assert answer.pods_fit is False
    assert "would not all fit" in answer.describe()


def test_what_if_changes_nothing_and_rejects_a_duplicate_name() -> None:
    scn = six_gpus(job("a", pods=2))
    first = what_if(scn, _job("new", pods=2), at=5)
    assert what_if(scn, _job("new", pods=2), at=5) == first
    with pytest.raises(ScenarioError, match="already has a workload named job-a-"):
        what_if(scn, _job("a"), at=5)


def test_job_without_queue_name_is_not_queued() -> None:
    answer = what_if(six_gpus(), _job("stray", queue=None))
    assert answer.decision is None
    assert answer.cluster_queue is None
    assert "not queued" in answer.describe()


def test_a_job_without_queue_name_asks_its_namespaces_default_localqueue() -> None:
    """As the operator's webhook labels it (Kueue's LocalQueue defaulting)."""
    scn = six_gpus()
    scn.local_queues.append(LocalQueue.model_validate(local_queue("default")))
    answer = what_if(scn, _job("stray", queue=None, pods=2))
    assert isinstance(answer.decision, d.Admit)
    assert answer.cluster_queue == "cq"

"""Two readers of one resource share one watch loop (the JobSet integration's JobSets and
those Trainer makes for TrainJobs): each event goes to both, in the order they registered,
and a re-list checks the keys either holds."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.trainjob import TrainJob
from atoll.control.workqueue import WorkQueue
from atoll.kube import handlers
from atoll.kube import watch as w
from atoll.kube.kinds import CUSTOM_KINDS
from atoll.state.cache import Cache
from tests.kube.wiring import bare_wiring


def test_a_second_reader_of_a_resource_shares_its_loop() -> None:
    calls: list[tuple[str, str | None, str]] = []

    def reader(name: str) -> w.Handler:
        def on(type: str | None, body: Any) -> None:
            calls.append((name, type, w.object_key(body)))

        return on

    watches = w.Watches()
    watches.on("jobset.x-k8s.io", "v1alpha2", "jobsets", reader("jobsets"), known=lambda: ["a/x"])
    watches.on("jobset.x-k8s.io", "v1alpha2", "jobsets", reader("trainer"), known=lambda: ["a/y"])
    (loop,) = watches.watches.values()
    loop.handler("ADDED", {"metadata": {"namespace": "a", "name": "z"}})
    assert calls == [("jobsets", "ADDED", "a/z"), ("trainer", "ADDED", "a/z")]
    assert set(loop.known()) == {"a/x", "a/y"}
    with pytest.raises(ValueError, match="different selectors"):
        watches.on(
            "jobset.x-k8s.io",
            "v1alpha2",
            "jobsets",
            reader("other"),
            known=list,
            field_selector="metadata.name=q",
        )


def test_one_readers_failure_does_not_hide_the_event_from_the_other() -> None:
    seen: list[str] = []

    def broken(type: str | None, body: Any) -> None:
        raise RuntimeError("a bad object")

    watches = w.Watches()
    watches.on("", "v1", "configmaps", broken, known=list)
    watches.on("", "v1", "configmaps", lambda t, b: seen.append(w.object_key(b)), known=list)
    (loop,) = watches.watches.values()
    loop.handler("ADDED", {"metadata": {"namespace": "a", "name": "z"}})
    assert seen == ["a/z"]


def _jobset(name: str, owner_kind: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "resourceVersion": "1"}
    if owner_kind is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "x/v1", "kind": owner_kind, "name": name, "uid": "u", "controller": True}
        ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"replicatedJobs": []},
    }


def test_trainers_jobsets_are_read_and_queue_their_trainjob_others_are_not_kept() -> None:
    """The TrainJob integration reads the JobSets Trainer makes (controlled by a TrainJob):
    kept, and each change queues the TrainJob of that name; a JobSet of another owner is not
    kept, and one that stops being Trainer's is dropped (its TrainJob queued once more)."""
    cache = Cache()
    cache.trainjobs["ns/llm"] = TrainJob.from_dict(
        {"metadata": {"namespace": "ns", "name": "llm"}, "spec": {"runtimeRef": {"name": "t"}}}
    )
    queue = WorkQueue("trainjobs")
    watches = w.Watches()
    handlers.register_kind(watches, bare_wiring(cache), queue, CUSTOM_KINDS[TrainJob.KIND])
    loop = watches.watches[w.Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")]

    loop.handler("ADDED", _jobset("other", "Deployment"))
    loop.handler("DELETED", _jobset("other", "Deployment"))
    assert cache.trainjob_jobsets == {}
    assert len(queue) == 0  # never kept: nothing to tell anybody
    loop.handler("ADDED", _jobset("llm", "TrainJob"))
    assert list(cache.trainjob_jobsets) == ["ns/llm"]
    assert len(queue) == 1  # its TrainJob
    assert set(loop.known()) == {"ns/llm"}
    loop.handler("MODIFIED", _jobset("llm", None))  # no longer Trainer's
    assert cache.trainjob_jobsets == {}

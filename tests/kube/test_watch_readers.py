"""Two readers of one resource share one watch loop (the JobSet integration's JobSets and
those Trainer makes for TrainJobs): each event goes to both, in the order they registered,
and a re-list checks the keys either holds."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.kube import watch as w


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

"""The Workload watch's shortcut (a status-only change reuses the known spec) gives the same
Workload as a full parse, and the status merge patch the writer sends turns the old status
into the new one."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.workload import Workload
from atoll.kube.handlers import _parse_workload
from atoll.kube.writers import merge_patch
from tests.api.builders import pod_set, workload
from tests.kube.mergepatch import apply_merge_patch


def _raw(generation: int = 1, uid: str = "u1", status: dict[str, Any] | None = None) -> Any:
    raw = workload(pod_sets=[pod_set(count=2)], queueName="q")
    raw["metadata"] |= {"uid": uid, "generation": generation, "resourceVersion": "7"}
    if status is not None:
        raw["status"] = status
    return raw


ADMITTED = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "admission": {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "count": 2}],
    },
}


def test_a_status_change_at_the_same_generation_shares_the_spec_and_parses_the_rest() -> None:
    known = Workload.from_dict(_raw())
    new = _raw(status=ADMITTED)
    new["metadata"]["resourceVersion"] = "9"
    fast = _parse_workload(new, known)
    assert fast is not None
    assert fast == Workload.from_dict(new)
    assert fast.spec is known.spec
    assert fast.metadata.resource_version == "9"


def test_a_new_generation_or_another_object_is_parsed_whole() -> None:
    known = Workload.from_dict(_raw())
    for other in (_raw(generation=2), _raw(uid="u2")):
        other["spec"]["queueName"] = "elsewhere"
        parsed = _parse_workload(other, known)
        assert parsed is not None
        assert parsed.spec.queue_name == "elsewhere"
        assert parsed.spec is not known.spec


def test_an_invalid_status_is_refused_as_by_a_full_parse() -> None:
    known = Workload.from_dict(_raw())
    bad = _raw(status={"conditions": [{"type": "Admitted"}]})
    assert _parse_workload(bad, known) is None


json_values = st.recursive(
    st.integers() | st.text(max_size=3) | st.booleans(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.sampled_from("abcde"), json_values, max_size=4)


@given(documents, documents)
def test_the_merge_patch_turns_the_old_status_into_the_new(old: Any, new: Any) -> None:
    assert apply_merge_patch(old, merge_patch(old, new)) == new


def test_the_merge_patch_carries_only_what_changed() -> None:
    old = {"conditions": [1], "admission": {"clusterQueue": "a", "x": 1}, "gone": 2}
    new = {"conditions": [1], "admission": {"clusterQueue": "b", "x": 1}}
    assert merge_patch(old, new) == {"admission": {"clusterQueue": "b"}, "gone": None}

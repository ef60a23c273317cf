"""Offline validation accepts and rejects what the API server does: the same table of
invalid manifests the cluster test applies with `--dry-run=server`, and every example."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from atoll.api.kinds import KUEUE_KINDS, MODELS
from atoll.state.apivalidation import Problem, check_object
from tests.api.builders import Manifest, cluster_queue, cpu_group
from tests.api.test_crds_cluster import EXAMPLES, INVALID

SCHEMA_WORDING = (
    "Unsupported value",
    "Required value",
    "must have at most",
    "at least 1",
    "Too long",
    "should match",
)
"""The API server's words for schema errors; offline they are pydantic's (the field is the
same)."""


def _check(manifest: Manifest) -> list[Problem]:
    model = MODELS[(manifest["apiVersion"], manifest["kind"])]
    return check_object(manifest, model)[1]


@pytest.mark.parametrize(("manifest", "expected"), INVALID)
def test_what_the_api_server_rejects_is_rejected_offline_naming_the_field(
    manifest: Manifest, expected: list[str]
) -> None:
    text = "; ".join(str(p) for p in _check(manifest))
    assert text, "accepted offline"
    for fragment in expected:
        if not fragment.startswith(SCHEMA_WORDING):
            assert fragment.lstrip(".") in text


def _kueue_documents() -> list[object]:
    docs = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            model = MODELS.get((doc.get("apiVersion"), doc.get("kind"))) if doc else None
            if model in KUEUE_KINDS:
                docs.append(pytest.param(doc, id=f"{path.parent.name}/{doc['metadata']['name']}"))
    return docs


@pytest.mark.parametrize("manifest", _kueue_documents())
def test_every_example_is_accepted_offline(manifest: Manifest) -> None:
    assert _check(manifest) == []


def test_unknown_fields_are_named() -> None:
    cq = cluster_queue("cq", resourceGroups=[cpu_group(cpu=4)])
    cq["spec"]["cohrtName"] = "typo"
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowLimit"] = 1
    assert sorted(str(p) for p in _check(cq)) == [
        "spec.cohrtName: unknown field",
        "spec.resourceGroups[0].flavors[0].resources[0].borrowLimit: unknown field",
    ]


def test_cel_rules_run_on_the_defaulted_object() -> None:
    cq = cluster_queue("cq", resourceGroups=[cpu_group(cpu="-1", borrowingLimit=2)])
    assert [str(p) for p in _check(cq)] == [
        "spec.resourceGroups: borrowingLimit must be nil when cohort is empty",
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "nominalQuota must be non-negative",
    ]


def test_examples_are_found() -> None:
    assert len(_kueue_documents()) > 20
    assert Path(EXAMPLES[0]).exists()

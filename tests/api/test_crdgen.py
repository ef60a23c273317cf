"""The CRDs generated from the models: golden files, structural schemas, Kueue's markers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.api import crdgen, v1beta1
from atoll.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SPECS = {spec.kind: spec for spec in crdgen.KINDS}


def _schema(kind: str) -> dict[str, Any]:
    return crdgen.openapi_schema(SPECS[kind].model)


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The node at a dotted path; `[]` steps into list items, `{}` into map values."""
    node = schema
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        elif part == "{}":
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


def test_crds_directory_matches_the_models() -> None:
    """Golden test: run `make crds` (or `atoll crds --out crds`) after changing a model."""
    generated = crdgen.generate()
    on_disk = {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}
    assert sorted(on_disk) == sorted(generated)
    for name, text in generated.items():
        assert on_disk[name] == text, f"crds/{name} is stale: run `make crds`"


@pytest.mark.parametrize("spec", crdgen.KINDS, ids=lambda s: s.kind)
def test_schema_is_structural(spec: crdgen.CrdSpec) -> None:
    assert crdgen.structural_problems(crdgen.openapi_schema(spec.model)) == []


def test_structural_check_catches_a_non_structural_schema() -> None:
    bad = {"type": "object", "properties": {"a": {"$ref": "#/x"}, "b": {"anyOf": [{}, {}]}}}
    problems = crdgen.structural_problems(bad)
    assert any(".a: unexpected keys ['$ref']" in p for p in problems)
    assert any(".b: anyOf outside" in p for p in problems)


@pytest.mark.parametrize("spec", crdgen.KINDS, ids=lambda s: s.kind)
def test_every_field_has_a_description(spec: crdgen.CrdSpec) -> None:
    schema = crdgen.openapi_schema(spec.model)
    missing = [
        path
        for path, node in crdgen.walk(schema)
        if path not in (".", ".metadata")
        and not path.endswith(("[]", "{}"))
        and not node.get("description")
    ]
    assert missing == []


@pytest.mark.parametrize("spec", crdgen.KINDS, ids=lambda s: s.kind)
def test_v1beta2_is_stored_and_v1beta1_served_deprecated(spec: crdgen.CrdSpec) -> None:
    crd = crdgen.crd(spec)
    versions = crd["spec"]["versions"]
    if spec.kind == "Workload":  # v1beta2 only: see atoll.api.v1beta1
        assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
            ("v1beta2", True, True)
        ]
        assert "conversion" not in crd["spec"]
        return
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1beta2", True, True),
        ("v1beta1", True, False),
    ]
    assert "deprecated" not in versions[0]
    assert versions[1]["deprecated"] is True
    assert "v1beta2" in versions[1]["deprecationWarning"]
    conversion = crd["spec"].get("conversion")
    if spec.kind in ("ClusterQueue", "LocalQueue"):
        assert conversion == {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {
                        "namespace": "atoll-system",
                        "name": "atoll-webhook-service",
                        "path": "/convert",
                        "port": 443,
                    }
                },
            },
        }
        assert crd["metadata"]["name"] in v1beta1.CONVERTED_CRDS
    else:  # the same fields in both versions: the API server only rewrites apiVersion
        assert conversion is None
        assert crd["metadata"]["name"] not in v1beta1.CONVERTED_CRDS
    for version in versions:
        assert crdgen.structural_problems(version["schema"]["openAPIV3Schema"]) == []
    # The settings alike in both versions but selectableFields, which the API server refuses
    # on a CRD whose versions' schemas differ unless they differ too.
    for key in ("subresources", "additionalPrinterColumns"):
        if key in versions[0] and spec.kind != "ClusterQueue":
            assert versions[1][key] == versions[0][key]
    assert "selectableFields" not in versions[1]


def test_v1beta1_cluster_queue_column_reads_spec_cohort() -> None:
    versions = crdgen.crd(SPECS["ClusterQueue"])["spec"]["versions"]
    paths = [[c["jsonPath"] for c in v["additionalPrinterColumns"]] for v in versions]
    assert paths[0][0] == ".spec.cohortName"
    assert paths[1] == [".spec.cohort", *paths[0][1:]]


@pytest.mark.parametrize(
    ("kind", "plural", "scope", "short_names", "status"),
    [
        ("ClusterQueue", "clusterqueues", "Cluster", ["cq"], True),
        ("LocalQueue", "localqueues", "Namespaced", ["queue", "queues", "lq"], True),
        ("ResourceFlavor", "resourceflavors", "Cluster", ["flavor", "flavors", "rf"], False),
        ("Cohort", "cohorts", "Cluster", ["co"], True),
        ("Topology", "topologies", "Cluster", ["topo"], False),
        ("WorkloadPriorityClass", "workloadpriorityclasses", "Cluster", ["wpc"], False),
        ("AdmissionCheck", "admissionchecks", "Cluster", ["ac"], True),
        ("Workload", "workloads", "Namespaced", ["kwl", "kueueworkload", "kueueworkloads"], True),
    ],
)
def test_names_scope_and_status_are_kueues(
    kind: str, plural: str, scope: str, short_names: list[str], status: bool
) -> None:
    crd = crdgen.crd(SPECS[kind])
    assert crd["metadata"]["name"] == f"{plural}.kueue.x-k8s.io"
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["names"]["shortNames"] == short_names
    assert crd["spec"]["scope"] == scope
    assert ("subresources" in crd["spec"]["versions"][0]) is status


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "ClusterQueue",
            [
                ("Cohort", ".spec.cohortName", 0),
                ("Strategy", ".spec.queueingStrategy", 1),
                ("Pending Workloads", ".status.pendingWorkloads", 0),
                ("Admitted Workloads", ".status.admittedWorkloads", 1),
            ],
        ),
        (
            "LocalQueue",
            [
                ("ClusterQueue", ".spec.clusterQueue", 0),
                ("Pending Workloads", ".status.pendingWorkloads", 0),
                ("Admitted Workloads", ".status.admittedWorkloads", 0),
            ],
        ),
        (
            "Workload",
            [
                ("Queue", ".spec.queueName", 0),
                ("Reserved in", ".status.admission.clusterQueue", 0),
                ("Admitted", ".status.conditions[?(@.type=='Admitted')].status", 0),
                ("Finished", ".status.conditions[?(@.type=='Finished')].status", 0),
                ("Age", ".metadata.creationTimestamp", 0),
            ],
        ),
        ("WorkloadPriorityClass", [("Value", ".value", 0)]),
        ("ResourceFlavor", []),
        ("Topology", []),
    ],
)
def test_printer_columns_are_kueues(kind: str, columns: list[tuple[str, str, int]]) -> None:
    version = crdgen.crd(SPECS[kind])["spec"]["versions"][0]
    found = [
        (c["name"], c["jsonPath"], c.get("priority", 0))
        for c in version.get("additionalPrinterColumns", [])
    ]
    assert found == columns


def test_workload_selects_by_cluster_queue_and_has_no_wl_short_name() -> None:
    crd = crdgen.crd(SPECS["Workload"])
    assert crd["spec"]["versions"][0]["selectableFields"] == [
        {"jsonPath": ".status.admission.clusterQueue"}
    ]
    assert "wl" not in crd["spec"]["names"]["shortNames"]


@pytest.mark.parametrize(
    ("kind", "path", "keys"),
    [
        ("ClusterQueue", "spec.resourceGroups.[].flavors", ["name"]),
        ("ClusterQueue", "spec.resourceGroups.[].flavors.[].resources", ["name"]),
        ("ClusterQueue", "spec.admissionChecksStrategy.admissionChecks", ["name"]),
        ("ClusterQueue", "status.conditions", ["type"]),
        ("ClusterQueue", "status.flavorsUsage", ["name"]),
        ("LocalQueue", "status.flavorsReservation", ["name"]),
        ("Workload", "spec.podSets", ["name"]),
        ("Workload", "status.admission.podSetAssignments", ["name"]),
        ("Workload", "status.schedulingStats.evictions", ["reason", "underlyingCause"]),
    ],
)
def test_list_map_keys_are_kueues(kind: str, path: str, keys: list[str]) -> None:
    node = _at(_schema(kind), path)
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == keys


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("ClusterQueue", "spec.resourceGroups"),
        ("ClusterQueue", "spec.resourceGroups.[].coveredResources"),
        ("ResourceFlavor", "spec.nodeTaints"),
        ("ResourceFlavor", "spec.tolerations"),
        ("Topology", "spec.levels"),
    ],
)
def test_atomic_lists_are_kueues(kind: str, path: str) -> None:
    assert _at(_schema(kind), path)["x-kubernetes-list-type"] == "atomic"


@pytest.mark.parametrize(
    ("kind", "path", "limit"),
    [
        ("ClusterQueue", "spec.resourceGroups", ("maxItems", 16)),
        ("ClusterQueue", "spec.resourceGroups.[].flavors", ("maxItems", 64)),
        ("ClusterQueue", "spec.resourceGroups.[].coveredResources", ("maxItems", 64)),
        ("ClusterQueue", "spec.resourceGroups.[].flavors.[].resources", ("maxItems", 64)),
        ("Cohort", "spec.resourceGroups", ("maxItems", 16)),
        ("Workload", "spec.podSets", ("maxItems", 18)),
        ("Topology", "spec.levels", ("maxItems", 16)),
        ("ResourceFlavor", "spec.nodeLabels", ("maxProperties", 8)),
        ("WorkloadPriorityClass", "description", ("maxLength", 2048)),
    ],
)
def test_limits_are_kueues(kind: str, path: str, limit: tuple[str, int]) -> None:
    key, value = limit
    assert _at(_schema(kind), path)[key] == value


@pytest.mark.parametrize(
    ("kind", "path", "default"),
    [
        ("ClusterQueue", "spec.queueingStrategy", "BestEffortFIFO"),
        ("ClusterQueue", "spec.stopPolicy", "None"),
        ("ClusterQueue", "spec.flavorFungibility", {}),
        ("ClusterQueue", "spec.flavorFungibility.whenCanBorrow", "MayStopSearch"),
        ("ClusterQueue", "spec.flavorFungibility.whenCanPreempt", "TryNextFlavor"),
        ("ClusterQueue", "spec.preemption", {}),
        ("ClusterQueue", "spec.preemption.borrowWithinCohort", {}),
        ("ClusterQueue", "spec.preemption.withinClusterQueue", "Never"),
        ("ClusterQueue", "spec.fairSharing.weight", 1),
        ("LocalQueue", "spec.stopPolicy", "None"),
        ("Workload", "spec.podSets.[].name", "main"),
        ("Workload", "spec.podSets.[].count", 1),
        ("Workload", "spec.active", True),
    ],
)
def test_defaults_are_kueues(kind: str, path: str, default: object) -> None:
    assert _at(_schema(kind), path)["default"] == default


def test_namespace_selector_has_no_default() -> None:
    assert "default" not in _at(_schema("ClusterQueue"), "spec.namespaceSelector")


def test_quantities_are_int_or_string_with_the_quantity_pattern() -> None:
    node = _at(
        _schema("ClusterQueue"), "spec.resourceGroups.[].flavors.[].resources.[].nominalQuota"
    )
    assert node["x-kubernetes-int-or-string"] is True
    assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert node["pattern"].startswith("^(\\+|-)?")
    usage = _at(_schema("Workload"), "status.admission.podSetAssignments.[].resourceUsage.{}")
    assert usage["x-kubernetes-int-or-string"] is True


def test_pod_template_preserves_unknown_fields() -> None:
    template = _at(_schema("Workload"), "spec.podSets.[].template")
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in template


def test_cel_rules_are_attached_where_they_apply() -> None:
    def messages(node: dict[str, Any]) -> list[str]:
        return [rule["message"] for rule in node.get("x-kubernetes-validations", [])]

    cq = _schema("ClusterQueue")
    assert "borrowingLimit must be nil when cohort is empty" in messages(_at(cq, "spec"))
    assert any("only one resourceGroup" in m for m in messages(_at(cq, "spec")))
    assert "nominalQuota must be non-negative" in messages(
        _at(cq, "spec.resourceGroups.[].flavors.[].resources.[]")
    )
    assert "must be unique" in messages(_at(_schema("Topology"), "spec.levels"))
    assert "field is immutable" in messages(_at(_schema("LocalQueue"), "spec.clusterQueue"))


def test_yaml_is_stable() -> None:
    first, second = crdgen.generate(), crdgen.generate()
    assert first == second
    for text in first.values():
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"


def test_crds_command_prints_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(s.name for s in crdgen.KINDS)


def test_crds_command_writes_files_and_removes_stale_ones(tmp_path: Path) -> None:
    stale = tmp_path / "kueue.x-k8s.io_oldkinds.yaml"
    stale.write_text("old")
    unrelated = tmp_path / "other.yaml"
    unrelated.write_text("keep")
    assert main(["crds", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("kueue.x-k8s.io_*.yaml")) == sorted(
        s.filename for s in crdgen.KINDS
    )
    assert unrelated.read_text() == "keep"
    assert (tmp_path / "kueue.x-k8s.io_clusterqueues.yaml").read_text() == crdgen.generate()[
        "kueue.x-k8s.io_clusterqueues.yaml"
    ]

"""deploy/discovery/: the NVLink discovery DaemonSet, outside the default install, with
least privilege (its own ServiceAccount, only get/patch on nodes) and a command atoll accepts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from atoll.cli.main import build_parser
from tests.deploy.test_manifests import DEPLOY, NAMESPACE, kustomize

DISCOVERY = DEPLOY / "discovery"
Doc = dict[str, Any]


def _kustomization() -> Doc:
    loaded = yaml.safe_load((DISCOVERY / "kustomization.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _documents() -> Iterator[Doc]:
    for name in _kustomization()["resources"]:
        yield from (d for d in yaml.safe_load_all((DISCOVERY / name).read_text()) if d)


def _one(kind: str) -> Doc:
    (found,) = [d for d in _documents() if d["kind"] == kind]
    return found


def _pod_spec() -> Doc:
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def test_every_file_is_listed_and_exists() -> None:
    listed = set(_kustomization()["resources"])
    on_disk = {p.name for p in DISCOVERY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_not_part_of_the_default_install() -> None:
    default = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert not any("discovery" in r for r in default["resources"])


def test_rbac_is_get_and_patch_on_nodes_only() -> None:
    role = _one("ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = _one("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "atoll-topology-discovery", "namespace": NAMESPACE}
    ]


def test_daemonset_uses_its_own_service_account_and_only_gpu_nodes() -> None:
    spec = _pod_spec()
    assert spec["serviceAccountName"] == _one("ServiceAccount")["metadata"]["name"]
    assert spec["serviceAccountName"] != "atoll"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_discovery_publishes_on_its_own_node_and_takes_no_gpu() -> None:
    (init,) = _pod_spec()["initContainers"]
    env = {e["name"]: e for e in init["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = build_parser().parse_args(init["args"])
    assert args.publish
    assert args.node is None  # from NODE_NAME
    for c in [init, *_pod_spec()["containers"]]:
        assert "nvidia.com/gpu" not in str(c.get("resources", {}))


def test_containers_run_unprivileged() -> None:
    spec = _pod_spec()
    assert spec["securityContext"]["runAsNonRoot"] is True
    for c in [*spec["initContainers"], *spec["containers"]]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]


def test_kustomize_renders_it_into_the_operator_namespace() -> None:
    rendered = kustomize(DISCOVERY)
    assert sorted(d["kind"] for d in rendered) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "ServiceAccount",
    ]
    for d in rendered:
        if d["kind"] in ("DaemonSet", "ServiceAccount"):
            assert d["metadata"]["namespace"] == NAMESPACE

"""The install manifests in deploy/: complete, parseable, least-privilege and consistent."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.api.configuration import (
    RUN_FRAMEWORKS,
    Configuration,
    load_configuration,
    parse_bind_address,
)
from atoll.api.meta import LabelSelector
from atoll.kube import webhook
from atoll.sandbox import binaries

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPO = DEPLOY.parent
NAMESPACE = "atoll-system"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
}

Doc = dict[str, Any]


def _kustomization() -> Doc:
    loaded = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _documents() -> Iterator[tuple[str, Doc]]:
    for name in _kustomization()["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if doc is not None:
                yield name, doc


def _one(kind: str, name: str | None = None) -> Doc:
    found = [
        d for _, d in _documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _config() -> Configuration:
    (generator,) = _kustomization()["configMapGenerator"]
    (file,) = generator["files"]
    return load_configuration(DEPLOY / file, namespace_file=Path("/nonexistent"))


def _container() -> Doc:
    (container,) = _one("Deployment", "atoll")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _container_port(name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    return int(ports[name])


# --------------------------------------------------------------------------- structure


def test_kustomization_lists_files_that_exist() -> None:
    kustomization = _kustomization()
    listed = list(kustomization["resources"])
    for generator in kustomization["configMapGenerator"]:
        listed += generator["files"]

    assert listed, "the kustomization lists nothing"
    missing = [name for name in listed if not (DEPLOY / name).is_file()]
    assert not missing


def test_every_manifest_in_deploy_is_listed() -> None:
    kustomization = _kustomization()
    listed = set(kustomization["resources"])
    for generator in kustomization["configMapGenerator"]:
        listed |= set(generator["files"])

    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed


def test_every_document_parses_with_kind_and_name() -> None:
    documents = list(_documents())

    assert len(documents) >= 10
    for file, doc in documents:
        assert doc.get("apiVersion"), file
        assert doc.get("kind"), file
        assert doc.get("metadata", {}).get("name"), f"{file}: {doc.get('kind')} without a name"


def test_namespaced_objects_live_in_the_operator_namespace() -> None:
    assert _kustomization()["namespace"] == NAMESPACE
    for file, doc in _documents():
        namespace = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{file}: cluster-scoped {doc['kind']} with a namespace"
        else:
            assert namespace == NAMESPACE, f"{file}: {doc['kind']} {doc['metadata']['name']}"


# --------------------------------------------------------------------------- RBAC


def _rules(kind: str) -> list[Doc]:
    rules = _one(kind, "atoll")["rules"]
    assert isinstance(rules, list)
    return rules


def _allows(rules: list[Doc], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )


def test_rbac_has_no_wildcards() -> None:
    for kind in ("ClusterRole", "Role"):
        for rule in _rules(kind):
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                values = rule.get(key, [])
                assert "*" not in values, f"{kind} rule {rule} has '*' in {key}"
                assert all("*" not in str(v) for v in values), f"{kind} rule {rule}"
            assert "nonResourceURLs" not in rule


# What the ClusterRole and Role grant is compared with what the code calls in
# test_rbac_from_code.py; here only what must never be granted. (Pods may be deleted: a
# stopped LeaderWorkerSet group's running pods are, as Kueue does; its controller recreates
# them gated.)


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    [
        pytest.param("", "secrets", "get", id="no-cluster-wide-secrets"),
        pytest.param("batch", "jobs", "delete", id="no-job-deletion"),
        pytest.param("kueue.x-k8s.io", "clusterqueues", "delete", id="no-queue-deletion"),
        pytest.param("coordination.k8s.io", "leases", "update", id="lease-only-in-namespace"),
        pytest.param(
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "list",
            id="no-webhook-listing",
        ),
    ],
)
def test_cluster_role_does_not_grant_more(group: str, resource: str, verb: str) -> None:
    assert not _allows(_rules("ClusterRole"), group, resource, verb)


def test_webhook_configuration_access_is_limited_to_atolls_own() -> None:
    (rule,) = [
        r for r in _rules("ClusterRole") if "mutatingwebhookconfigurations" in r["resources"]
    ]

    assert rule["resourceNames"] == [_one("MutatingWebhookConfiguration")["metadata"]["name"]]


def test_role_grants_the_lease_and_the_shared_certificate_in_its_namespace() -> None:
    rules = _rules("Role")

    for verb in ("get", "create", "update"):
        assert _allows(rules, "coordination.k8s.io", "leases", verb)
    assert _allows(rules, "", "secrets", "create")
    (named,) = [r for r in rules if r.get("resourceNames") and "secrets" in r["resources"]]
    assert named["resourceNames"] == [_config().internal_cert_management.webhook_secret_name]
    assert not _allows([r for r in rules if not r.get("resourceNames")], "", "secrets", "get")


@pytest.mark.parametrize("kind", ["ClusterRoleBinding", "RoleBinding"])
def test_bindings_give_the_roles_to_the_service_account(kind: str) -> None:
    binding = _one(kind, "atoll")
    role_kind = binding["roleRef"]["kind"]

    assert _one(role_kind, binding["roleRef"]["name"])
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "atoll", "namespace": NAMESPACE}
    ]
    assert _one("ServiceAccount", "atoll")


# --------------------------------------------------------------------------- Deployment


def test_deployment_runs_two_replicas_of_the_release_image() -> None:
    deployment = _one("Deployment", "atoll")
    pod = deployment["spec"]["template"]

    assert deployment["spec"]["replicas"] == 2
    assert pod["spec"]["serviceAccountName"] == "atoll"
    selector = LabelSelector.model_validate(deployment["spec"]["selector"])
    assert selector.matches(pod["metadata"]["labels"])
    container = _container()
    assert container["image"] == "ghcr.io/atoll-dev/atoll:0.1.0"
    assert container["args"] == ["run", "--config", "/etc/atoll/config.yaml"]


@pytest.mark.parametrize(
    ("probe", "path"),
    [
        pytest.param("livenessProbe", "/healthz", id="liveness"),
        pytest.param("readinessProbe", "/readyz", id="readiness"),
    ],
)
def test_deployment_probes_hit_the_health_port(probe: str, path: str) -> None:
    get = _container()[probe]["httpGet"]

    assert get["path"] == path
    assert _container_port(get["port"]) == 8081


def test_deployment_exposes_metrics_and_webhook_ports() -> None:
    assert _container_port("metrics") == 8080
    assert _container_port("webhook") == 9443


def test_deployment_is_locked_down() -> None:
    pod_spec = _one("Deployment", "atoll")["spec"]["template"]["spec"]
    container = _container()
    security = container["securityContext"]

    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]


def test_replicas_prefer_different_nodes() -> None:
    pod = _one("Deployment", "atoll")["spec"]["template"]
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]

    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = LabelSelector.model_validate(term["podAffinityTerm"]["labelSelector"])
    assert selector.matches(pod["metadata"]["labels"])


def test_deployment_mounts_the_generated_config_where_args_point() -> None:
    pod_spec = _one("Deployment", "atoll")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    (generator,) = _kustomization()["configMapGenerator"]
    (mount,) = [m for m in _container()["volumeMounts"] if m["mountPath"] == "/etc/atoll"]

    assert volumes[mount["name"]]["configMap"]["name"] == generator["name"]
    assert (Path(mount["mountPath"]) / generator["files"][0]).as_posix() == _container()["args"][2]


# --------------------------------------------------------------------------- configuration


def test_config_is_a_valid_kueue_configuration_consistent_with_the_manifests() -> None:
    config = _config()
    webhook = _one("MutatingWebhookConfiguration")

    assert config.api_version == "config.kueue.x-k8s.io/v1beta2"
    assert config.ignored_fields == ()
    assert config.namespace == NAMESPACE
    assert config.lease_namespace == NAMESPACE
    assert config.wait_for_pods_ready_enabled
    assert config.wait_for_pods_ready.timeout == 1800
    metrics = parse_bind_address(config.metrics.bind_address)
    health = parse_bind_address(config.health.health_probe_bind_address)
    assert metrics is not None
    assert metrics[1] == _container_port("metrics")
    assert health is not None
    assert health[1] == _container_port("health")
    assert config.webhook.port == _container_port("webhook")
    assert config.atoll.webhook_configuration_name == webhook["metadata"]["name"]
    service = webhook["webhooks"][0]["clientConfig"]["service"]
    assert config.internal_cert_management.webhook_service_name == service["name"]


def test_config_enables_every_kind_atoll_runs() -> None:
    """As Kueue's shipped manager config enables every framework it has (its API default is
    `batch/job` alone), the deploy config enables every one atoll runs; a missing CRD is
    skipped at start, not fatal (tests/kube/test_integration_wiring.py)."""
    assert set(_config().integrations.frameworks) == set(RUN_FRAMEWORKS)


# --------------------------------------------------------------------------- Services and webhook


def _service_target(service: Doc, port: int) -> int:
    (entry,) = [p for p in service["spec"]["ports"] if p["port"] == port]
    target = entry["targetPort"]
    return _container_port(target) if isinstance(target, str) else int(target)


@pytest.mark.parametrize(
    ("name", "port", "container_port"),
    [
        pytest.param("atoll-metrics", 8080, 8080, id="metrics"),
        pytest.param("atoll-webhook-service", 443, 9443, id="webhook"),
    ],
)
def test_services_reach_the_operator_pods(name: str, port: int, container_port: int) -> None:
    service = _one("Service", name)
    pod_labels = _one("Deployment", "atoll")["spec"]["template"]["metadata"]["labels"]

    assert LabelSelector(match_labels=service["spec"]["selector"]).matches(pod_labels)
    assert _service_target(service, port) == container_port


def test_webhook_sees_job_creates_and_updates_through_the_webhook_service() -> None:
    hook = _one("MutatingWebhookConfiguration", "atoll-mutating")["webhooks"][0]
    service_ref = hook["clientConfig"]["service"]
    service = _one("Service", service_ref["name"])

    assert service_ref["path"] == "/mutate-batch-v1-job"
    assert service_ref["namespace"] == service["metadata"]["namespace"] == NAMESPACE
    assert _service_target(service, service_ref["port"]) == 9443
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [
        {
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["jobs"],
            "scope": "Namespaced",
        }
    ]


def test_webhook_ca_bundle_is_left_for_the_operator() -> None:
    for hook in _one("MutatingWebhookConfiguration", "atoll-mutating")["webhooks"]:
        assert not hook["clientConfig"].get("caBundle")


def test_every_webhook_calls_the_handler_of_its_kind() -> None:
    hooks = _one("MutatingWebhookConfiguration", "atoll-mutating")["webhooks"]
    for hook in hooks:
        handler = hook["clientConfig"]["service"]["path"].removeprefix("/")
        group, version, plural = webhook.RULES[handler]
        (rule,) = hook["rules"]
        assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == (
            [group],
            [version],
            [plural],
        )
        # what the sandbox's configuration selects too: every object of a kind, only the
        # plain pods that name a queue
        assert hook.get("objectSelector") == webhook.object_selector(handler)
    assert len(hooks) == len(webhook.RULES)


def test_an_installed_configuration_with_the_old_job_selector_is_warned_of() -> None:
    """The operator warns at start when the installed configuration sends only labelled Jobs
    (an older deploy/webhook.yaml): a default LocalQueue would never apply."""
    config = _one("MutatingWebhookConfiguration", "atoll-mutating")
    assert webhook.selector_differences(config) == []
    old = copy.deepcopy(config)
    old["webhooks"][0]["objectSelector"] = webhook.object_selector(webhook.POD_WEBHOOK_ID)
    (warning,) = webhook.selector_differences(old)
    assert warning.startswith("webhook mjob.atoll.dev has objectSelector")
    assert "LocalQueue named default is not applied" in warning


@pytest.mark.parametrize(
    ("namespace", "mutated"),
    [
        pytest.param("kube-system", False, id="kube-system"),
        pytest.param(NAMESPACE, False, id="own-namespace"),
        pytest.param("default", True, id="default"),
        pytest.param("team-a", True, id="team"),
    ],
)
def test_webhook_skips_system_namespaces(namespace: str, mutated: bool) -> None:
    labels = {"kubernetes.io/metadata.name": namespace}
    for hook in _one("MutatingWebhookConfiguration", "atoll-mutating")["webhooks"]:
        selector = LabelSelector.model_validate(hook["namespaceSelector"])
        assert selector.matches(labels) is mutated
    assert _config().managed_jobs_namespace_selector.matches(labels) is mutated


# --------------------------------------------------------------------------- image


def _dockerfile_instructions() -> list[tuple[str, str]]:
    lines = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    instructions = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_runs_atoll_as_a_non_root_user() -> None:
    instructions = _dockerfile_instructions()
    final_stage = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM") :]

    assert final_stage[0] == ("FROM", "python:3.11-slim")
    users = [value for keyword, value in final_stage if keyword == "USER"]
    assert users
    assert users[-1].split(":")[0] not in ("0", "root")
    assert json.loads(dict(final_stage)["ENTRYPOINT"]) == ["atoll"]
    assert json.loads(dict(final_stage)["CMD"]) == ["run"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "atoll" in scripts


def test_readme_gives_the_install_commands() -> None:
    readme = (DEPLOY / "README.md").read_text()

    assert "kubectl apply --server-side -f crds/" in readme
    assert "kubectl apply -k deploy/" in readme


# --------------------------------------------------------------------------- rendering


def _kubectl() -> str:
    built = binaries.bin_dir() / "kubectl"
    found = str(built) if os.access(built, os.X_OK) else shutil.which("kubectl")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("rendering deploy/ needs kubectl (run `make sandbox-bin`)", pytrace=False)
    pytest.skip("rendering deploy/ needs kubectl (run `make sandbox-bin`)")


def kustomize(folder: Path) -> list[Doc]:
    """The documents `kubectl kustomize FOLDER` renders."""
    done = subprocess.run(
        [_kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_kustomize_renders_the_generated_config_into_the_deployment() -> None:
    rendered = kustomize(DEPLOY)

    kinds = sorted(d["kind"] for d in rendered)
    assert kinds == sorted([*(d["kind"] for _, d in _documents()), "ConfigMap"])
    (config_map,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    assert config_map["metadata"]["name"].startswith("atoll-config-")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert config_map["metadata"]["name"] in [v.get("configMap", {}).get("name") for v in volumes]
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == yaml.safe_load(
        (DEPLOY / "config.yaml").read_text()
    )
    for doc in rendered:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "atoll"

"""deploy/rbac.yaml grants exactly what the operator's code uses, derived from the code:

- every kind the operator watches (its kopf registry and its own `Watches`, built as `atoll
  run` builds them): list and watch;
- every kubernetes_asyncio call in `atoll/kube/` (an `ast` walk): the verb and resource its
  method name says (`read_namespaced_job` → get jobs, `patch_namespaced_job_status` → patch
  jobs/status, `…_custom_object(GROUP, VERSION, [ns,] "workloads", …)` → workloads);
- three needs no call shows, each with its reason (`IMPLIED`).

Calls that only the sandbox's `url` webhook mode makes are not granted in deploy/, which runs
in `service` mode (`SANDBOX_ONLY`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kopf
import pytest
import yaml

from atoll.control.workqueue import WorkQueue
from atoll.kube import handlers
from atoll.kube.kinds import CUSTOM_KINDS
from atoll.kube.watch import Watches
from atoll.state.cache import Cache
from tests.kube.wiring import bare_wiring

KUBE = Path(__file__).resolve().parents[2] / "operator" / "atoll" / "kube"
RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
Grant = tuple[str, str, str]
"""(API group, resource, verb)."""

VERBS = {
    "get": "get",
    "read": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
CALL = re.compile(
    r"^(get|read|list|create|replace|patch|delete)_(?:namespaced_|cluster_)?(\w+?)"
    r"(_status)?(?:_for_all_namespaces)?$"
)
TYPED = {
    "job": ("batch", "jobs"),
    "pod": ("", "pods"),
    "event": ("", "events"),
    "namespace": ("", "namespaces"),
    "secret": ("", "secrets"),
    "lease": ("coordination.k8s.io", "leases"),
    "priority_class": ("scheduling.k8s.io", "priorityclasses"),
    "mutating_webhook_configuration": (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
}
"""kubernetes_asyncio's name of a kind in its method names → (group, plural)."""

SANDBOX_ONLY = {
    "create_mutating_webhook_configuration": "url mode creates its configuration; deploy/ ships it",
    "create_namespace": "the Lease namespace is created only if RBAC permits; deploy/ ships it",
}
IMPLIED: dict[Grant, str] = {
    ("batch", "jobs/finalizers", "update"): "Workloads are owned by their Job with "
    "blockOwnerDeletion (jobframework.build_workload)",
    ("jobset.x-k8s.io", "jobsets/finalizers", "update"): "Workloads are owned by their "
    "JobSet with blockOwnerDeletion (jobframework.owned_workload)",
    ("kubeflow.org", "mpijobs/finalizers", "update"): "Workloads are owned by their "
    "MPIJob with blockOwnerDeletion (jobframework.owned_workload)",
    ("trainer.kubeflow.org", "trainjobs/finalizers", "update"): "Workloads are owned by "
    "their TrainJob with blockOwnerDeletion (jobframework.owned_workload)",
    ("", "pods/finalizers", "update"): "a single pod's Workload is owned by the pod with "
    "blockOwnerDeletion (podgroups.build_workload)",
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"): "kopf follows served kinds",
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"): "kopf follows served kinds",
}
LIVE_ONLY = {"live.py"}
"""`atoll explain` reads with the user's own credentials, not the operator's."""


def _watched() -> set[Grant]:
    cache = Cache()
    registry = kopf.OperatorRegistry()
    wiring = bare_wiring(cache)
    handlers.register(registry, wiring)
    for kind in CUSTOM_KINDS.values():  # every integration
        handlers.register_kind(registry, wiring, WorkQueue(kind.plural), kind)
    watches = Watches()
    handlers.register_watches(watches, wiring)
    grants = {
        (resource.group, resource.plural, verb)
        for resource in watches.watches
        for verb in ("list", "watch")
    }
    for handler in registry._watching.get_all_handlers():
        plural = handler.selector.any_name or handler.selector.plural
        assert plural, handler
        for verb in ("list", "watch"):
            grants.add((handler.selector.group or "", plural, verb))
    return grants


def _custom_resource(call: ast.Call, namespaced: bool) -> tuple[str, str] | None:
    """(group, plural) of a `…_custom_object(group, version, [namespace,] plural, …)` call:
    a group given by name is atoll's GROUP (Kueue's); a plural given by name is unknown."""
    index = 3 if namespaced else 2
    if len(call.args) <= index:
        return None
    group, plural = call.args[0], call.args[index]
    if not (isinstance(plural, ast.Constant) and isinstance(plural.value, str)):
        return None
    if isinstance(group, ast.Constant) and isinstance(group.value, str):
        return group.value, plural.value
    return "kueue.x-k8s.io", plural.value


API_CLASS = re.compile(r"^client\.\w+Api$")


def _api_objects(tree: ast.AST) -> set[str]:
    """Names (`core`, `self.batch`, …) assigned a kubernetes_asyncio API object."""
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and API_CLASS.match(ast.unparse(node.value.func))
        ):
            names |= {ast.unparse(t) for t in node.targets}
    return names


def _is_api(receiver: ast.expr, names: set[str]) -> bool:
    if isinstance(receiver, ast.Call):
        return bool(API_CLASS.match(ast.unparse(receiver.func)))
    return ast.unparse(receiver) in names


def _called() -> tuple[set[Grant], list[str]]:
    """Grants of the API methods called or referenced in kube/ (not the cache's methods of
    the same names), and custom-object calls whose resource the walk cannot name."""
    grants: set[Grant] = set()
    unnamed: list[str] = []
    for path in sorted(KUBE.glob("*.py")):
        if path.name in LIVE_ONLY:
            continue
        tree = ast.parse(path.read_text())
        calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
        receivers = _api_objects(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_api(node.value, receivers):
                continue
            method = node.attr
            found = CALL.match(method)
            if found is None or method in SANDBOX_ONLY:
                continue
            action, kind, status = found.groups()
            sub = "/status" if status else ""
            if kind.endswith("custom_object"):
                call = calls.get(id(node))
                named = _custom_resource(call, "namespaced" in method) if call else None
                if named is None:
                    unnamed.append(f"{path.name}:{node.lineno} {method}")
                    continue
                group, plural = named
            elif kind in TYPED:
                group, plural = TYPED[kind]
            else:
                continue  # not an API call (create_task, read_text, …)
            grants.add((group, plural + sub, VERBS[action]))
    return grants, unnamed


def _granted() -> set[Grant]:
    grants: set[Grant] = set()
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            grants.add((group, resource, verb))
    return grants


def _custom_kinds() -> set[Grant]:
    """The writer reads and patches the managed custom kinds it suspends (JobSet, MPIJob)
    through one pair of calls parametrised by `kube.kinds.CUSTOM_KINDS`: get and patch of each
    kind. A kind without a suspend patch (LeaderWorkerSet: its pods are gated) is only
    watched."""
    return {
        (kind.group, kind.plural, verb)
        for kind in CUSTOM_KINDS.values()
        if kind.suspend_patch
        for verb in ("get", "patch")
    }


def _needed() -> set[Grant]:
    called, _ = _called()
    return _watched() | called | set(IMPLIED) | _custom_kinds()


def test_every_call_names_its_resource_or_is_a_list_of_a_watched_kind() -> None:
    _, unnamed = _called()

    # bootstrap's LISTs of Kueue kinds pass the plural as a variable: those are LISTs of
    # kinds the operator watches anyway; the writer's get and patch of a managed custom kind
    # are granted per kind (`_custom_kinds`).
    custom = ("get_namespaced_custom_object", "patch_namespaced_custom_object")
    assert all(
        "list_cluster_custom_object" in u or (u.startswith("writers.py") and u.endswith(custom))
        for u in unnamed
    ), unnamed


def test_the_walk_finds_the_calls_it_must() -> None:
    called, _ = _called()

    for grant in [
        ("kueue.x-k8s.io", "workloads/status", "patch"),
        ("batch", "jobs", "patch"),
        ("", "pods", "patch"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "events", "create"),
    ]:
        assert grant in called


def test_rbac_grants_everything_the_code_uses() -> None:
    assert _needed() - _granted() == set()


def test_rbac_grants_nothing_the_code_does_not_use() -> None:
    assert _granted() - _needed() == set()


@pytest.mark.parametrize("grant", sorted(IMPLIED), ids=lambda g: f"{g[1]}-{g[2]}")
def test_implied_grants_say_why(grant: Grant) -> None:
    assert IMPLIED[grant]

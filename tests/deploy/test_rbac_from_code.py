"""deploy/rbac.yaml grants exactly what the operator's code uses, derived from the code:

- every kind the operator watches (its kopf registry and its own `Watches`, built as `atoll
  run` builds them): list and watch;
- every request sent in `atoll/kube/` (an `ast` walk of `Rest.request`/`Rest.send` and the
  writer's `_send`): the verb its HTTP method says on the resource of its `Resource.path`
  (`PATCH WORKLOADS.path(ns, name, "status")` → patch workloads/status; a GET of one object is
  get, of a collection list);
- three needs no call shows, each with its reason (`IMPLIED`).

Calls that only the sandbox's `url` webhook mode makes are not granted in deploy/, which runs
in `service` mode (`SANDBOX_ONLY`).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
from pathlib import Path
from types import ModuleType

import kopf
import pytest
import yaml

from atoll.control.workqueue import WorkQueue
from atoll.kube import bootstrap, handlers
from atoll.kube.kinds import CUSTOM_KINDS
from atoll.kube.rest import Resource
from atoll.kube.watch import Watches
from atoll.state.cache import Cache
from tests.kube.wiring import bare_wiring

KUBE = Path(__file__).resolve().parents[2] / "operator" / "atoll" / "kube"
RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
Grant = tuple[str, str, str]
"""(API group, resource, verb)."""

METHODS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
"""HTTP method → RBAC verb; GET is get for one object, list for a collection."""
SENDERS = {"request": (0, 1), "send": (0, 1), "_send": (2, 3)}
"""`Rest.request`/`Rest.send` and `KubeWriter._send`: the positions of their method and path
arguments."""

SANDBOX_ONLY = {
    ("POST", "MUTATING_WEBHOOKS"): "url mode creates its configuration; deploy/ ships it",
    ("POST", "NAMESPACES"): "the Lease namespace is created only if RBAC permits; deploy/ ships it",
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
    watches = Watches()
    handlers.register_watches(watches, wiring)
    for kind in CUSTOM_KINDS.values():  # every integration
        handlers.register_kind(watches, wiring, WorkQueue(kind.plural), kind)
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


def _resource(expr: ast.expr, module: ModuleType) -> Resource | None:
    """The `Resource` an expression names: a module constant (`WORKLOADS`, `_JOBSETS`) or a
    `Resource(group, version, plural)` of constants; None for a variable (`res`)."""
    if isinstance(expr, ast.Name):
        found = getattr(module, expr.id, None)
        return found if isinstance(found, Resource) else None
    if isinstance(expr, ast.Call) and ast.unparse(expr.func) == "Resource":
        parts = [a.value for a in expr.args if isinstance(a, ast.Constant)]
        if len(parts) == 3 and all(isinstance(p, str) for p in parts):
            return Resource(*parts)
    return None


def _subs(call: ast.Call) -> list[str] | None:
    """The subresources a `.path(namespace, name, sub)` call may name ("" for none); None
    when one is not a constant (the walk cannot say which)."""
    if len(call.args) < 3:
        return [""]
    sub = call.args[2]
    options = [sub.body, sub.orelse] if isinstance(sub, ast.IfExp) else [sub]
    if not all(
        isinstance(o, ast.Constant) and (o.value is None or isinstance(o.value, str))
        for o in options
    ):
        return None
    return [f"/{o.value}" if isinstance(o, ast.Constant) and o.value else "" for o in options]


def _paths(tree: ast.AST) -> dict[tuple[int, str], ast.Call]:
    """`.path(...)` calls assigned to a variable, by (function line, variable name)."""
    out: dict[tuple[int, str], ast.Call] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "path"
            ):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        out[fn.lineno, t.id] = node.value
    return out


def _functions(tree: ast.AST) -> dict[int, int]:
    """The line of the innermost function around each node, by the node's id."""
    out: dict[int, int] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                out[id(node)] = fn.lineno  # inner functions come later and win
    return out


def _called() -> tuple[set[Grant], list[str]]:
    """Grants of the requests sent in kube/ (`Rest.request`, `Rest.send`, the writer's
    `_send`): the HTTP method and the `Resource.path` they are sent to; and the requests whose
    resource the walk cannot name (a variable kind)."""
    grants: set[Grant] = set()
    unnamed: list[str] = []
    for path in sorted(KUBE.glob("*.py")):
        if path.name in LIVE_ONLY:
            continue
        module = importlib.import_module(f"atoll.kube.{path.stem}")
        tree = ast.parse(path.read_text())
        assigned, around = _paths(tree), _functions(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            at = SENDERS.get(node.func.attr)
            if at is None or len(node.args) <= at[1]:
                continue
            method, target = node.args[at[0]], node.args[at[1]]
            if not (isinstance(method, ast.Constant) and isinstance(method.value, str)):
                continue
            if isinstance(target, ast.Name):
                target = assigned.get((around.get(id(node), -1), target.id), target)
            if isinstance(target, ast.Constant):
                continue  # a path that is no resource's (`/version`)
            if not (
                isinstance(target, ast.Call)
                and isinstance(target.func, ast.Attribute)
                and target.func.attr == "path"
            ):
                unnamed.append(f"{path.name}:{node.lineno} {method.value} ?{ast.unparse(target)}")
                continue
            owner = target.func.value
            if (method.value, ast.unparse(owner)) in SANDBOX_ONLY:
                continue
            one = len(target.args) >= 2
            verb = METHODS.get(method.value) or ("get" if one else "list")
            resource, subs = _resource(owner, module), _subs(target)
            if resource is None or subs is None:
                unnamed.append(f"{path.name}:{node.lineno} {verb} {ast.unparse(target)}")
                continue
            for sub in subs:
                grants.add((resource.group, resource.plural + sub, verb))
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


def _bootstrap_lists() -> set[Grant]:
    """The LISTs the initial listing sends (`bootstrap._load` and `bootstrap.serves` for
    every custom kind), recorded from a fake `Rest.list`: it takes the kind as variables,
    which the walk cannot read."""
    paths: list[str] = []

    class Recorder:
        def __init__(self, api: object) -> None:
            del api

        async def list(self, resource: Resource, parse: object) -> tuple[list[object], str]:
            del parse
            paths.append(resource.path(None))
            return [], "1"

    async def load() -> None:
        await bootstrap._load(None, Cache(), {}, handlers.Parsers())  # type: ignore[arg-type]
        for kind in CUSTOM_KINDS.values():
            await bootstrap.serves(None, Cache(), kind)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bootstrap, "Rest", Recorder)
        asyncio.run(load())
    grants = set()
    for p in paths:
        parts = p.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        grants.add((group, parts[-1], "list"))
    return grants


def _needed() -> set[Grant]:
    called, _ = _called()
    return _watched() | called | set(IMPLIED) | _custom_kinds() | _bootstrap_lists()


def test_the_initial_listing_lists_only_watched_kinds() -> None:
    lists = _bootstrap_lists()

    assert ("kueue.x-k8s.io", "workloads", "list") in lists
    assert ("batch", "jobs", "list") in lists
    assert ("scheduling.k8s.io", "priorityclasses", "list") in lists
    assert lists <= _watched()


def test_every_call_names_its_resource_or_is_covered_otherwise() -> None:
    _, unnamed = _called()

    # `Rest.list` takes the kind as variables: the initial listing's LISTs are recorded by
    # `_bootstrap_lists` (explain's live read is not the operator's); the watch loop GETs the
    # path of each watched kind (`_watched`); the writer's get and patch of a managed custom
    # kind (`res`) are granted per kind (`_custom_kinds`).
    writer = {line: verb for line, verb in _writer_custom_requests()}
    assert writer, "the walk finds the writer's custom-kind requests"
    for u in unnamed:
        where, verb, target = u.split(" ", 2)
        file, line = where.split(":")
        assert (
            (file == "rest.py" and verb == "list")
            or (file == "watch.py" and (verb, target) == ("GET", "?path"))
            or (file == "writers.py" and writer.get(int(line)) == verb)
        ), u


def _writer_custom_requests() -> list[tuple[int, str]]:
    """(line, verb) of the writer's requests to `res.path(...)`, a variable kind."""
    tree = ast.parse((KUBE / "writers.py").read_text())
    return sorted(
        (n.lineno, {"GET": "get", "PATCH": "patch"}[n.args[2].value])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "_send"
        and len(n.args) > 3
        and isinstance(n.args[2], ast.Constant)
        and ast.unparse(n.args[3]).startswith("res.path")
    )


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

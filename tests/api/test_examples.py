"""The example manifests are complete and consistent: every folder explains itself, every
reference between objects resolves inside its folder, and Jobs use only the fake image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.api import AdmissionCheck, ClusterQueue, Job, LocalQueue, ResourceFlavor, parse_object
from atoll.api.jobset import JobSet
from atoll.api.labels import QUEUE_NAME_LABEL
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.meta import KubeObject
from atoll.api.mpijob import MPIJob
from atoll.api.trainjob import TrainJob
from atoll.control import jobframework as jf
from atoll.sim.scenario import default_queues
from tests.api.builders import NOT_MANIFESTS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FOLDERS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and p.name not in NOT_MANIFESTS)
IMAGE = "registry.invalid/atoll/sleep:1"


def _objects(folder: Path) -> list[Any]:
    return [
        parse_object(doc)
        for path in sorted(folder.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def _named(objects: list[Any], kind: type[KubeObject]) -> dict[str, Any]:
    return {o.name: o for o in objects if isinstance(o, kind)}


def test_the_examples_this_issue_promises_exist() -> None:
    assert {p.name for p in FOLDERS} >= {
        "quickstart", "flavors-taints", "cohort-borrowing", "hierarchical-cohorts",
        "priority", "topology", "gpu-queues", "dra",
    }  # fmt: skip


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_folder_has_a_readme_and_manifests(folder: Path) -> None:
    assert (folder / "README.md").read_text().strip()
    assert list(folder.glob("*.yaml"))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_references_resolve_within_the_folder(folder: Path) -> None:
    objects = _objects(folder)
    flavors = _named(objects, ResourceFlavor)
    queues = _named(objects, ClusterQueue)
    for cq in queues.values():
        for rg in cq.spec.resource_groups:
            assert {f.name for f in rg.flavors} <= set(flavors), cq.name
    checks = set(_named(objects, AdmissionCheck))
    for cq in queues.values():
        strategy = cq.spec.admission_checks_strategy
        named = {r.name for r in strategy.admission_checks} if strategy else set()
        assert named <= checks, cq.name
    for lq in _named(objects, LocalQueue).values():
        assert lq.spec.cluster_queue in queues, lq.name
    local_queues = {o.name for o in objects if isinstance(o, LocalQueue)}
    defaults = default_queues(o for o in objects if isinstance(o, LocalQueue))
    owners = (Job, JobSet, MPIJob, TrainJob, LeaderWorkerSet)
    for created in [o for kind in owners for o in _named(objects, kind).values()]:
        job = jf.with_default_queue(created, defaults.__contains__)  # as the webhook labels it
        assert (job.metadata.labels or {})[QUEUE_NAME_LABEL] in local_queues, job.name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_jobs_use_only_the_fake_image_and_start_suspended(folder: Path) -> None:
    for job in _named(_objects(folder), Job).values():
        containers = job.spec.template.spec.containers
        assert containers, job.name
        assert {c.image for c in containers} == {IMAGE}, job.name
        assert job.spec.suspend is True, job.name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_mpijobs_use_only_the_fake_image_with_a_launcher_and_workers(folder: Path) -> None:
    for mpijob in _named(_objects(folder), MPIJob).values():
        specs = mpijob.spec.mpi_replica_specs
        assert set(specs) == {"Launcher", "Worker"}, mpijob.name
        images = {c.image for s in specs.values() for c in s.template.spec.containers or ()}
        assert images == {IMAGE}, mpijob.name

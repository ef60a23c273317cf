"""Read model of a TrainJob (`trainer.kubeflow.org/v1alpha1`, Kubeflow Trainer v2.0) and of the
training runtimes it names: the fields atoll reads to admit a TrainJob as one gang whose pod
sets come from its runtime's JobSet template. atoll never writes these models back: starting
and stopping a TrainJob patches its raw object (`atoll.kube.writers`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from atoll.api.core import JobCondition, ResourceRequirements
from atoll.api.jobset import JobSetSpec, JobTemplateMeta, ReplicatedJobStatus
from atoll.api.meta import ApiModel, Int32, KubeObject

GROUP: Final = "trainer.kubeflow.org"
VERSION: Final = "v1alpha1"
PLURAL: Final = "trainjobs"
RUNTIME_PLURAL: Final = "trainingruntimes"
CLUSTER_RUNTIME_PLURAL: Final = "clustertrainingruntimes"
CLUSTER_RUNTIME_KIND: Final = "ClusterTrainingRuntime"
RUNTIME_KIND: Final = "TrainingRuntime"
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
"""Label of the runtime's replicated jobs saying which TrainJob step they run."""
TRAINER_STEP: Final = "trainer"
"""The ancestor step whose pod count is the TrainJob's number of nodes."""
NODE_CONTAINER: Final = "node"
"""The trainer container whose resources `spec.trainer.resourcesPerNode` replaces."""
OVERRIDE_IDX_ANNOTATION: Final = "kueue.x-k8s.io/trainjob-override-idx"
"""Index of the first pod spec override the admission appended (cut back there at stop)."""
USER_OVERRIDES_ANNOTATION: Final = "atoll.dev/trainjob-user-overrides"
"""The TrainJob's own pod spec overrides as they were before the admission's start took the
admitted jobs out of their `targetJobs` (JSON; restored at stop). Trainer v2.0 refuses a job
named by two overrides, so the admission's override of a job the user also targets carries
the user's fields for it."""


class RuntimeRef(ApiModel):
    """The runtime a TrainJob runs on."""

    name: str = ""
    kind: str | None = None
    """`ClusterTrainingRuntime` (the default) or `TrainingRuntime` (in the TrainJob's namespace)."""
    api_group: str | None = None


class Trainer(ApiModel):
    """The trainer step's settings the TrainJob overrides."""

    num_nodes: Int32 | None = None
    """Pods of the trainer step (else the runtime's `mlPolicy.numNodes`)."""
    resources_per_node: ResourceRequirements | None = None
    """Replaces the resources of the trainer's `node` container."""


class TrainJobSpec(ApiModel):
    """The TrainJob spec fields atoll reads."""

    runtime_ref: RuntimeRef = RuntimeRef()
    trainer: Trainer | None = None
    suspend: bool | None = None
    pod_spec_overrides: tuple[dict[str, Any], ...] | None = None
    """Trainer v2.0's per-replicated-job pod spec overrides (admission appends its own)."""


class TrainJobStatus(ApiModel):
    """The TrainJob status fields atoll reads."""

    conditions: tuple[JobCondition, ...] | None = None
    """Suspended, Created, Complete, Failed."""
    jobs_status: tuple[ReplicatedJobStatus, ...] | None = None
    """Pod counts of each replicated job of its JobSet (as the JobSet reports them)."""


class TrainJob(KubeObject):
    """A TrainJob."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = "TrainJob"

    spec: TrainJobSpec = TrainJobSpec()
    status: TrainJobStatus = TrainJobStatus()


class MLPolicy(ApiModel):
    """The runtime's ML policy (atoll reads the default number of nodes)."""

    num_nodes: Int32 | None = None


class JobSetTemplate(ApiModel):
    """The runtime's JobSet template."""

    metadata: JobTemplateMeta | None = None
    spec: JobSetSpec = JobSetSpec()


class TrainingRuntimeSpec(ApiModel):
    """The runtime spec fields atoll reads."""

    ml_policy: MLPolicy | None = None
    template: JobSetTemplate = JobSetTemplate()


class TrainingRuntime(KubeObject):
    """A namespaced training runtime."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = RUNTIME_KIND

    spec: TrainingRuntimeSpec = TrainingRuntimeSpec()


class ClusterTrainingRuntime(KubeObject):
    """A cluster-wide training runtime."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = CLUSTER_RUNTIME_KIND

    spec: TrainingRuntimeSpec = TrainingRuntimeSpec()

"""Read model of a JobSet (`jobset.x-k8s.io/v1alpha2`): the fields atoll reads to admit it as one
gang of pod sets, one per replicated job. atoll never writes these models back: starting and
stopping a JobSet patches its raw object (`atoll.kube.writers`), so fields atoll does not model
survive.
"""

from __future__ import annotations

from typing import ClassVar

from atoll.api.core import JobCondition, JobSpec
from atoll.api.meta import ApiModel, Int32, KubeObject, PreservingModel

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""Label the JobSet controller puts on its Jobs and pods."""
REPLICATED_JOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


class JobTemplateMeta(PreservingModel):
    """Labels and annotations of a replicated job's Jobs."""

    labels: dict[str, str] | None = None
    """Labels of the Jobs."""
    annotations: dict[str, str] | None = None
    """Annotations of the Jobs."""


class JobTemplateSpec(ApiModel):
    """The Job template of a replicated job."""

    metadata: JobTemplateMeta | None = None
    """Labels and annotations of the Jobs."""
    spec: JobSpec = JobSpec()
    """The Jobs' spec (its pod template is the pod set's template)."""


class ReplicatedJob(ApiModel):
    """`replicas` Jobs made from one template."""

    name: str
    """Name of the replicated job; the name of its pod set."""
    replicas: Int32 = 1
    """How many Jobs are created from the template."""
    template: JobTemplateSpec = JobTemplateSpec()
    """The template of each Job."""


class JobSetSpec(ApiModel):
    """The JobSet spec fields atoll reads."""

    replicated_jobs: tuple[ReplicatedJob, ...] = ()
    """The replicated jobs, in order."""
    suspend: bool | None = None
    """Whether the JobSet controller suspends its Jobs."""


class ReplicatedJobStatus(ApiModel):
    """Counts of the Jobs of one replicated job."""

    name: str
    """Name of the replicated job."""
    ready: Int32 = 0
    """Jobs whose pods are all ready or succeeded."""
    succeeded: Int32 = 0
    """Jobs that completed."""
    failed: Int32 = 0
    """Jobs that failed."""
    active: Int32 = 0
    """Jobs with at least one pending or running pod."""
    suspended: Int32 = 0
    """Jobs that are suspended."""


class JobSetStatus(ApiModel):
    """The JobSet status fields atoll reads."""

    conditions: tuple[JobCondition, ...] | None = None
    """Completed, Failed, Suspended, StartupPolicyCompleted."""
    replicated_jobs_status: tuple[ReplicatedJobStatus, ...] | None = None
    """Counts per replicated job."""
    terminal_state: str | None = None
    """Completed or Failed once the JobSet finished."""


class JobSet(KubeObject):
    """A JobSet."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = "JobSet"

    spec: JobSetSpec = JobSetSpec()
    """The JobSet spec."""
    status: JobSetStatus = JobSetStatus()
    """The JobSet status."""

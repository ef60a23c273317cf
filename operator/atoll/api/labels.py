"""Kueue's label, annotation, finalizer and scheduling-gate keys on Jobs, pods and Workloads.

Mirrors pkg/controller/constants/constants.go and apis/kueue/v1beta2/constants.go (which key is
read and which is written: docs/architecture.md, "Compatibility with Kueue").
"""

from __future__ import annotations

from typing import Final

QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
JOB_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
"""The Job controller's: the completion index of an Indexed Job's pod (read only)."""
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_SECONDS_LABEL: Final = "kueue.x-k8s.io/max-exec-time-seconds"
PREBUILT_WORKLOAD_LABEL: Final = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_LABEL: Final = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL: Final = "kueue.x-k8s.io/cluster-queue-name"

POD_GROUP_NAME_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"
"""Put on the plain pods Kueue (and atoll) manage."""
POD_FINALIZER: Final = "kueue.x-k8s.io/managed"
"""The finalizer on managed plain pods: a pod stays until its Workload has accounted for it."""
RETRIABLE_IN_GROUP_ANNOTATION: Final = "kueue.x-k8s.io/retriable-in-group"
"""`"false"` on a pod of a group: once no pod of the group runs, the group is finished."""

POD_GROUP_TOTAL_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
IS_GROUP_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/is-group-workload"
ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
"""Scheduling gate of plain pods until their Workload is admitted."""
SUSPENDED_BY_PARENT_ANNOTATION: Final = "kueue.x-k8s.io/pod-suspending-parent"
"""On the pod templates of a managed owner whose pods are gated at creation (LeaderWorkerSet):
the owner's framework name."""
POD_GROUP_SERVING_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-serving"
ROLE_HASH_ANNOTATION: Final = "kueue.x-k8s.io/role-hash"
"""A grouped pod's role (its pod set), stamped at creation so that what its start merges in
does not change it."""
COMPONENT_WORKLOAD_INDEX_ANNOTATION: Final = "kueue.x-k8s.io/component-workload-index"
"""On each of an owner's several Workloads (one per LeaderWorkerSet group): its index."""
JOB_OWNER_GVK_ANNOTATION: Final = "kueue.x-k8s.io/job-owner-gvk"
JOB_OWNER_NAME_ANNOTATION: Final = "kueue.x-k8s.io/job-owner-name"

JOB_MIN_PARALLELISM_ANNOTATION: Final = "kueue.x-k8s.io/job-min-parallelism"
JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION: Final = (
    "kueue.x-k8s.io/job-completions-equal-parallelism"
)
ADMISSION_GATED_BY_ANNOTATION: Final = "kueue.x-k8s.io/admission-gated-by"
WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
STOPPING_ANNOTATION: Final = "kueue.x-k8s.io/stopping"

RUN_DURATION_ANNOTATION: Final = "atoll.dev/run-duration"
"""atoll's: how long a Job runs once its pods run (a Go duration). The sandbox's fake nodes
complete pods after it, `atoll simulate` runs Jobs for it, `atoll explain` estimates with it."""

BACKFILL_ANNOTATION: Final = "atoll.dev/backfill"
"""atoll's, on a ClusterQueue: `"true"` turns on reservation and backfill for it."""
BACKFILL_GRACE_ANNOTATION: Final = "atoll.dev/backfill-grace"
"""atoll's, on a ClusterQueue: added to a guaranteed end (a Go duration, default 15s)."""
BACKFILL_MIN_WAIT_ANNOTATION: Final = "atoll.dev/backfill-min-wait"
"""atoll's, on a ClusterQueue: the head takes a reservation after waiting this long."""
BACKFILL_MAX_HOLD_ANNOTATION: Final = "atoll.dev/backfill-max-hold"
"""atoll's, on a ClusterQueue: how long one workload may hold a reservation."""
BACKFILL_RESERVE_AFTER_ANNOTATION: Final = "atoll.dev/backfill-reserve-after"
"""atoll's, on a ClusterQueue: besides the head, any workload that has waited this long
takes a reservation."""

RESOURCE_IN_USE_FINALIZER: Final = "kueue.x-k8s.io/resource-in-use"
DEFAULT_LOCAL_QUEUE: Final = "default"
DEFAULT_PRIORITY_CLASS: Final = "default"

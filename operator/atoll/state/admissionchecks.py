"""Admission checks: the gates another controller opens before a Workload is admitted.

Kueue's two-phase admission (pkg/workload/admissionchecks.go, the workload controller's
`reconcileSyncAdmissionChecks` / `reconcileCheckBasedEviction`, pkg/cache/scheduler
clusterqueue.go `inactiveReason`), as atoll runs it:

- a ClusterQueue's `admissionChecksStrategy` names the checks its Workloads must pass, each
  for every flavor or only for `onFlavors` (`for_flavors`);
- a ClusterQueue that names a check that does not exist, or one whose controller has not set
  its `Active` condition True, admits nothing (`inactive_reason`: `AdmissionCheckNotFound`,
  `AdmissionCheckInactive`, as Kueue's);
- when atoll reserves quota for a Workload of such a queue it writes QuotaReserved=True and
  one `status.admissionChecks` entry per check, Pending, and Admitted stays False
  (`UnsatisfiedChecks`) until every check's controller has set its check `Ready`; then the
  Workload is Admitted and its Job starts with the checks' `podSetUpdates` merged into its
  pod templates. A check set `Retry` evicts the Workload (reason `AdmissionCheck`), its
  quota goes back and the checks are reset to Pending for the next reservation (after the
  check's `requeueAfterSeconds`, if it set one); a check set `Rejected` deactivates it.

The state changes themselves are in `state/lifecycle.py` (one definition for the operator
and the simulator).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from atoll.api.admissioncheck import AdmissionCheck, CheckState
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.workload import AdmissionCheckState, Workload

NOT_FOUND = "AdmissionCheckNotFound"
INACTIVE = "AdmissionCheckInactive"
EVICTED_BY_CHECK = "AdmissionCheck"
"""Kueue's Evicted reason (and DeactivationTarget reason) of a Workload a check sent back."""
RETRY_MESSAGE = "At least one admission check is false"
UNSATISFIED = "UnsatisfiedChecks"
UNSATISFIED_MESSAGE = "The workload has not all checks ready"


KUEUE_CONTROLLERS = {
    "kueue.x-k8s.io/provisioning-request": "ProvisioningRequest",
    "kueue.x-k8s.io/multikueue": "MultiKueue",
}
"""The checks Kueue's own manager runs, which atoll does not."""


def not_run(check: AdmissionCheck) -> str | None:
    """A warning when the check names a controller of Kueue's own (which runs inside Kueue's
    manager, not beside atoll) and nothing has set it Active; None otherwise."""
    kind = KUEUE_CONTROLLERS.get(check.spec.controller_name)
    if kind is None or is_active(check):
        return None
    return (
        f"its controller {check.spec.controller_name} is Kueue's {kind} controller, which atoll "
        "does not run: the ClusterQueues that name this check admit nothing until a controller "
        "sets it Active"
    )


def names(cq: ClusterQueue) -> tuple[str, ...]:
    """Every check the ClusterQueue names, in order."""
    strategy = cq.spec.admission_checks_strategy
    return tuple(r.name for r in strategy.admission_checks) if strategy else ()


def for_flavors(cq: ClusterQueue, flavors: Iterable[str]) -> tuple[str, ...]:
    """The checks a Workload admitted on these flavors of the ClusterQueue must pass, by
    name: a rule without `onFlavors` applies to every Workload (Kueue's
    `AdmissionChecksForWorkload`)."""
    strategy = cq.spec.admission_checks_strategy
    if strategy is None:
        return ()
    used = set(flavors)
    return tuple(
        sorted(
            {
                r.name
                for r in strategy.admission_checks
                if not r.on_flavors or used.intersection(r.on_flavors)
            }
        )
    )


def flavors_of(pod_sets: Iterable[Any]) -> set[str]:
    """The flavors an engine admission (decision or assumed) assigns: its pod sets'
    `(resource, flavor)` pairs."""
    return {str(f) for ps in pod_sets for _, f in ps.flavors}


def is_active(check: AdmissionCheck) -> bool:
    """Its controller has set the `Active` condition True."""
    return any(
        c.type == "Active" and c.status.value == "True" for c in check.status.conditions or ()
    )


def inactive_reason(cq: ClusterQueue, checks: Mapping[str, AdmissionCheck]) -> str | None:
    """Why the ClusterQueue admits nothing because of its checks, or None."""
    wanted = names(cq)
    if any(n not in checks for n in wanted):
        return NOT_FOUND
    if any(not is_active(checks[n]) for n in wanted):
        return INACTIVE
    return None


def states(wl: Workload) -> tuple[AdmissionCheckState, ...]:
    return wl.status.admission_checks or ()


def all_ready(wl: Workload) -> bool:
    return all(s.state is CheckState.READY for s in states(wl))


def rejected(wl: Workload) -> tuple[str, ...]:
    return tuple(s.name for s in states(wl) if s.state is CheckState.REJECTED)


def retrying(wl: Workload) -> tuple[AdmissionCheckState, ...]:
    return tuple(s for s in states(wl) if s.state is CheckState.RETRY)


def synced(
    current: Iterable[AdmissionCheckState], wanted: Iterable[str], now: dt.datetime
) -> tuple[AdmissionCheckState, ...]:
    """The states of exactly the `wanted` checks, sorted by name: a known one kept as it is,
    a new one Pending (Kueue's `syncAdmissionCheckConditions`)."""
    known = {s.name: s for s in current}
    return tuple(
        known.get(name)
        or AdmissionCheckState(
            name=name, state=CheckState.PENDING, last_transition_time=now, message=""
        )
        for name in sorted(set(wanted))
    )


def reset(
    current: Iterable[AdmissionCheckState], now: dt.datetime
) -> tuple[AdmissionCheckState, ...]:
    """Every check back to Pending after an eviction, a Retry counted (Kueue's
    `resetChecksOnEviction`)."""
    out = []
    for s in current:
        if s.state is CheckState.PENDING:
            out.append(s)
            continue
        retries = (s.retry_count or 0) + 1 if s.state is CheckState.RETRY else s.retry_count
        out.append(
            AdmissionCheckState(
                name=s.name,
                state=CheckState.PENDING,
                last_transition_time=now,
                message=f"Reset to Pending after eviction. Previously: {s.state.value}",
                requeue_after_seconds=s.requeue_after_seconds,
                retry_count=retries if s.state is CheckState.RETRY else None,
            )
        )
    return tuple(out)


def retry_at(wl: Workload) -> dt.datetime | None:
    """The latest time a Retry check asks the Workload to wait until (its last transition
    plus its `requeueAfterSeconds`), or None (Kueue's `GetMaxRetryTime`)."""
    times = [
        s.last_transition_time + dt.timedelta(seconds=s.requeue_after_seconds)
        for s in retrying(wl)
        if s.requeue_after_seconds is not None
    ]
    return max(times, default=None)

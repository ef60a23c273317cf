"""What-if: would this Job (or JobSet, MPIJob, TrainJob, LeaderWorkerSet, pod group) be
admitted now, to which flavor, and whom would it preempt?

"Now" is a point in a scenario: the simulator runs the scenario up to `at` seconds, the
object's Workload (composed by the operator's adapter of its kind) is added to that cache as
if just created, and the simulator's own next step
(`state.decide.Decider.decide`, the operator's: engine cycle, placement, domain preemption)
is run once on a fork (`state.whatif.ask`), without assuming anything. The answer is the
step's decision for the Job; when another workload is ahead of it in its ClusterQueue, the
answer also says what the decision would be were the Job at the head.
If the quota admits it, its pods are tried on the nodes as they are then (bound, then
released), to say whether they could all start. A LeaderWorkerSet has one Workload per replica
group (`scenario.gangs_of`): all are added, and the step is asked for each in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from atoll.api.meta import KubeObject
from atoll.control import podgroups as pg
from atoll.engine import decisions as d
from atoll.sim import workloads as sw
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.pods import Gang, Part, request, signature
from atoll.sim.scenario import (
    Scenario,
    ScenarioError,
    gangs_of,
    scenario_defaults,
)
from atoll.state import convert
from atoll.state import workloads as wls
from atoll.state.whatif import ask, decision_json, describe


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIf:
    job: str
    at: float
    cluster_queue: str | None
    ahead: tuple[str, ...]
    """Pending workloads ahead of the Job in its ClusterQueue (queue order)."""
    decision: d.Decision | None
    """The engine's decision this cycle (None: the Job is not a head this cycle)."""
    at_head: d.Decision | None
    """The decision were the Job at the head of its ClusterQueue."""
    pods_fit: bool | None
    """Whether all pods could be bound now on the admitted flavor's nodes."""

    def describe(self) -> str:
        lines = [f"{self.job} at t={self.at:g}s, ClusterQueue {self.cluster_queue or '-'}:"]
        if self.decision is None and self.at_head is None and not self.ahead:
            lines.append("  not queued: the Job has no kueue.x-k8s.io/queue-name label")
        if self.ahead:
            lines.append(f"  waits behind {len(self.ahead)}: {', '.join(self.ahead[:10])}")
        if self.decision is not None:
            lines.append("  now: " + describe(self.decision))
        if self.at_head is not None and self.at_head is not self.decision:
            lines.append("  if it were at the head: " + describe(self.at_head))
        if self.pods_fit is False:
            lines.append(
                "  but its pods would not all fit on the nodes now: it would wait for "
                "capacity and be evicted after the waitForPodsReady timeout"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "at": self.at,
            "clusterQueue": self.cluster_queue,
            "ahead": list(self.ahead),
            "decision": decision_json(self.decision),
            "atHead": decision_json(self.at_head),
            "podsFit": self.pods_fit,
        }


def _pods_fit(sim: GangSimulator, key: str, dec: d.Decision | None) -> bool | None:
    if not isinstance(dec, d.Admit | d.Preempt):
        return None
    ew = sim.cache.engine_workload(key)
    if ew is None or isinstance(dec, d.Preempt):
        return None  # victims' pods would leave first; placement is judged after that
    by_name = {ps.name: ps for ps in ew.pod_sets}
    parts = []
    for adm in dec.pod_sets:
        names = {str(f) for _, f in adm.flavors}
        flavors = [convert.flavor(f) for f in sim.scenario.flavors if f.name in names]
        ps = by_name[adm.name]
        parts.append(Part(sig=signature(ps, flavors), req=request(ps), size=adm.count))
    gang = Gang(owner=key, parts=tuple(parts))
    gang.place(sim.pool)
    fits = gang.complete
    gang.release(sim.pool)
    return fits


def add_job(sim: GangSimulator, job: KubeObject, at: float) -> str:
    """Add the object's Workload to the simulator's cache as if created at `at`; its key.
    Raises ScenarioError when the operator would not create one (its kind's framework is not
    enabled, an unknown priority class, an incomplete pod group)."""
    cache = sim.cache
    if not job.metadata.namespace:
        job = job.model_copy(
            update={"metadata": job.metadata.model_copy(update={"namespace": "default"})}
        )
    try:
        wl = sim.kinds.compose(job, cache, created=at)
    except sw.ComposeError as e:
        raise ScenarioError(f"{job.name}: no Workload ({e.reason}): {e}") from e
    key = wls.wl_key(wl)
    if key in cache.workloads:
        raise ScenarioError(f"the scenario already has a workload named {wl.name}")
    cache.set_workload(wl)
    return key


def what_if(
    scn: Scenario, job: KubeObject, *, at: float = 0.0, settings: Settings | None = None
) -> WhatIf:
    """The step's answer for `job` at time `at` of the scenario (nothing is assumed); for a
    LeaderWorkerSet, its first group's (`what_ifs` answers for each)."""
    return what_ifs(scn, job, at=at, settings=settings)[0]


def what_ifs(
    scn: Scenario, job: KubeObject, *, at: float = 0.0, settings: Settings | None = None
) -> list[WhatIf]:
    """The step's answer at time `at` of the scenario for each Workload the operator would
    create for `job` (one; a LeaderWorkerSet's: one per replica group, all added before
    any is asked), nothing assumed."""
    base = settings or Settings.of(scn.config)
    sim = GangSimulator(scn, replace(base, until=at))
    sim.run()
    job = pg.with_defaults(job, scenario_defaults(scn))
    added = [add_job(sim, gang, at) for gang in gangs_of(job)]
    out = []
    for key in added:
        answer = ask(sim.decider, key, sw.EPOCH + at)
        out.append(
            WhatIf(
                job=wls.owner_job_key(sim.cache.workloads[key]) or key,
                at=at,
                cluster_queue=answer.cluster_queue,
                ahead=answer.ahead,
                decision=answer.decision,
                at_head=answer.at_head,
                pods_fit=_pods_fit(sim, key, answer.at_head),
            )
        )
    return out

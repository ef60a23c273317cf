"""Admission Fair Sharing: each LocalQueue's recent usage, which orders the Workloads of a
ClusterQueue whose `admissionScope.admissionMode` is `UsageBasedAdmissionFairSharing`.

Mirrors Kueue's pkg/util/admissionfairsharing, pkg/cache/queue/afs and the LocalQueue
controller's sampling:

- A LocalQueue's *consumed* resources are an exponentially decayed average of what its
  admitted Workloads hold: at each sample, `new = old·(1−α) + admitted·α` with
  `α = 1 − 0.5^(elapsed / usageHalfLifeTime)` (α = 0 for a half-life of 0, whose samples
  reset the usage to nothing). Amounts are kept in milli-units and each product is truncated
  to a milli-unit, as Kueue's `MulByFloat` does. A LocalQueue is sampled when its last sample
  is `usageSamplingInterval` old; the value is written to its status
  (`status.fairSharing.admissionFairSharingStatus`).
- An *entry penalty* is charged to a LocalQueue when a Workload of an AFS ClusterQueue gets
  its quota: its requests × α(usageSamplingInterval). Without it, a LocalQueue with many
  pending Workloads would keep the lead until the next sample. The penalty moves into the
  consumed resources when the Workload is admitted (after its decay up to then), and is
  dropped if the Workload loses its quota before that.
- The *usage* that orders a queue is `Σ weight(r) · (consumed + penalties)(r) / LocalQueue
  weight`, in base units (cores, bytes, devices), a resource not in `resourceWeights`
  weighing 1. Lower usage goes first, before priority. Among the preemption candidates of
  one such ClusterQueue, those of the LocalQueue that used more are tried first
  (`engine.snapshot.queue_candidate_key`).

Differences from Kueue v0.17, on purpose:

- A penalty leaves the LocalQueue when its Workload is admitted, whatever the path: Kueue
  moves it only on a direct Pending → Admitted update, so that one taken after admission
  checks stays for good.
- After a restart, and on a replica that takes over the lead, the usage goes on from the
  LocalQueue's status when it is newer than what the process knows (Kueue starts again from
  the usage admitted at that moment).
- Among the preemption candidates of a topology domain, the usage is not used (they are
  taken by priority, lowest first, in each domain).
- Samples are taken by the scheduling step (`Cache.sample_usage`), at its clock, when a
  LocalQueue's last one is an interval old (the operator's timer and the simulator's events
  wake it then). Kueue also samples a LocalQueue at each of its Workloads' events once it
  has been charged a penalty.
- A ClusterQueue whose `admissionScope` changes is ordered by the new one at once (Kueue keeps
  the order it was created with until it restarts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atoll.api.configuration import Configuration
from atoll.engine import model as m
from atoll.engine.quantities import is_milli

Amounts = dict[str, int]
"""Resource → amount in milli-units."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The Configuration's `admissionFairSharing`, in seconds."""

    half_life: float = 0.0
    sampling: float = 300.0
    weights: Mapping[str, float] = field(default_factory=dict)


def tracker_for(config: Configuration) -> Tracker | None:
    """A tracker as the Configuration's `admissionFairSharing` says (None: off)."""
    afs = config.admission_fair_sharing
    if afs is None or not config.admission_fair_sharing_enabled:
        return None
    return Tracker(
        Settings(
            half_life=afs.usage_half_life_time,
            sampling=afs.usage_sampling_interval,
            weights=dict(afs.resource_weights),
        )
    )


def alpha(elapsed: float, half_life: float) -> float:
    """The weight of the newest sample after `elapsed` seconds (Kueue's calculateAlphaRate)."""
    if half_life <= 0:
        return 0.0
    return 1.0 - math.pow(0.5, elapsed / half_life)


def scaled(amounts: Mapping[str, int], factor: float) -> Amounts:
    """Every amount × `factor`, truncated to a milli-unit (Kueue's MulByFloat)."""
    return {r: int(v * factor) for r, v in amounts.items()}


def merged(*parts: Mapping[str, int]) -> Amounts:
    out: Amounts = {}
    for part in parts:
        for r, v in part.items():
            out[r] = out.get(r, 0) + v
    return out


def decayed(
    old: Mapping[str, int], admitted: Mapping[str, int], elapsed: float, half_life: float
) -> Amounts:
    """Kueue's CalculateDecayedConsumed."""
    a = alpha(elapsed, half_life)
    return merged(scaled(old, 1 - a), scaled(admitted, a))


def admission_amounts(admission: m.Admission) -> Amounts:
    """What an admission holds, per resource over every flavor, in milli-units (the engine's
    amounts are milli-units for cpu, units for the rest)."""
    out: Amounts = {}
    for ps in admission.pod_sets:
        for r, amount in ps.resource_usage:
            out[r] = out.get(r, 0) + (amount if is_milli(r) else amount * 1000)
    return out


def scalar(amounts: Mapping[str, int], weights: Mapping[str, float], lq_weight: float) -> float:
    """Kueue's CalcFSUsageFromResources divided by the LocalQueue's weight (a weight of 0
    puts an unused LocalQueue first and a used one last, as Go's float ordering, where NaN
    comes before every number, does)."""
    total = sum(weights.get(r, 1.0) * v / 1000 for r, v in sorted(amounts.items()) if v)
    if lq_weight > 0:
        total /= lq_weight
    elif total > 0:
        return math.inf
    else:
        return -math.inf
    return -math.inf if math.isnan(total) else total


@dataclass(slots=True)
class Tracker:
    """Every LocalQueue's consumed resources and penalties (keys `namespace/name`)."""

    settings: Settings
    consumed: dict[str, Amounts] = field(default_factory=dict)
    last_update: dict[str, float] = field(default_factory=dict)
    penalties: dict[str, Amounts] = field(default_factory=dict)
    """LocalQueue → the sum of its Workloads' penalties not yet moved into `consumed`."""
    charged: dict[str, tuple[str, Amounts]] = field(default_factory=dict)
    """Workload → (its LocalQueue, its penalty) while the penalty is in `penalties`."""
    admitted: dict[str, Amounts] = field(default_factory=dict)
    """LocalQueue → what its admitted Workloads hold now."""
    admitted_by: dict[str, tuple[str, Amounts]] = field(default_factory=dict)
    """Workload → (its LocalQueue, what it holds) while admitted."""
    changed: set[str] = field(default_factory=set)
    """LocalQueues whose usage changed since the owner last looked (`take_changed`)."""
    written: dict[str, tuple[Amounts, float]] = field(default_factory=dict)
    """LocalQueue → the (consumed, time) of its last sample: what its status shows."""
    sampled: bool = False
    """A sample was taken since the owner last cleared this (the statuses to write)."""
    version: int = 0
    """Bumped by every change of a LocalQueue's usage."""
    _oldest: float | None = None
    """min(`last_update`), None when to be worked out again."""

    def fork(self) -> Tracker:
        return Tracker(
            settings=self.settings,
            consumed=dict(self.consumed),
            last_update=dict(self.last_update),
            penalties=dict(self.penalties),
            charged=dict(self.charged),
            admitted=dict(self.admitted),
            admitted_by=dict(self.admitted_by),
            changed=set(self.changed),
            written=dict(self.written),
            sampled=self.sampled,
            version=self.version,
        )

    # -- what admitted Workloads hold ----------------------------------------------------
    def set_admitted(self, key: str, lq: str | None, amounts: Amounts | None) -> None:
        """`key` is admitted in `lq` holding `amounts` (None: not admitted)."""
        before = self.admitted_by.get(key)
        after = (lq, amounts) if lq is not None and amounts is not None else None
        if before == after:
            return
        if before is not None:
            del self.admitted_by[key]
            self._add(self.admitted, before[0], before[1], -1)
        if after is not None:
            self.admitted_by[key] = after
            self._add(self.admitted, after[0], after[1], 1)

    @staticmethod
    def _add(table: dict[str, Amounts], lq: str, amounts: Mapping[str, int], sign: int) -> None:
        total = dict(table.get(lq, {}))
        for r, v in amounts.items():
            total[r] = total.get(r, 0) + sign * v
        total = {r: v for r, v in total.items() if v}
        if total:
            table[lq] = total
        else:
            table.pop(lq, None)

    # -- penalties -----------------------------------------------------------------------
    def charge(self, key: str, lq: str, requests: Mapping[str, int]) -> None:
        """`key` got quota: charge its LocalQueue the entry penalty (Kueue's assumeWorkload)."""
        self.drop(key)
        penalty = scaled(requests, alpha(self.settings.sampling, self.settings.half_life))
        if not any(penalty.values()):
            return
        self.charged[key] = (lq, penalty)
        self._add(self.penalties, lq, penalty, 1)
        self._changed(lq)

    def drop(self, key: str) -> None:
        """`key` lost its quota before it was admitted: its penalty goes."""
        charged = self.charged.pop(key, None)
        if charged is not None:
            self._add(self.penalties, charged[0], charged[1], -1)
            self._changed(charged[0])

    def settle(self, key: str, at: float) -> None:
        """`key` was admitted at `at`: its LocalQueue's usage decays up to then, and its
        penalty moves into the consumed resources (Kueue's updateAfsConsumedUsage)."""
        charged = self.charged.pop(key, None)
        if charged is None:
            return
        lq, penalty = charged
        self._add(self.penalties, lq, penalty, -1)
        if lq in self.last_update:
            self._advance(lq, max(at, self.last_update[lq]))
            self.consumed[lq] = merged(self.consumed[lq], penalty)
        self._changed(lq)

    # -- samples -------------------------------------------------------------------------
    def seed(self, lq: str, consumed: Amounts, at: float) -> None:
        """Usage read back from a LocalQueue's status, when newer than what is known: after
        a restart, and on a replica that does not lead (the leader's samples), so that it
        goes on from them when it takes over. This process's own statuses are never newer
        (their time is truncated to the second)."""
        last = self.last_update.get(lq)
        if last is None or at > last:
            if self.settings.half_life <= 0:
                consumed = {}  # its next sample resets it anyway
            self.consumed[lq] = consumed
            self.last_update[lq] = at
            self._oldest = None
            self.written[lq] = (consumed, at)
            self._changed(lq)

    def forget(self, lq: str) -> None:
        """The LocalQueue was deleted."""
        for table in (self.consumed, self.last_update, self.penalties, self.written):
            table.pop(lq, None)
        self._oldest = None
        for key in [k for k, (q, _) in self.charged.items() if q == lq]:
            del self.charged[key]
        self._changed(lq)

    def _advance(self, lq: str, now: float) -> None:
        elapsed = now - self.last_update[lq]
        admitted = self.admitted.get(lq, {})
        if self.settings.half_life <= 0:
            value: Amounts = {}
        else:
            value = decayed(self.consumed[lq], admitted, elapsed, self.settings.half_life)
        self.consumed[lq] = {r: v for r, v in value.items() if v} if value else {}
        self.last_update[lq] = now
        self._oldest = None

    def due(self, local_queues: Iterable[str], now: float) -> None:
        """Sample every LocalQueue of `local_queues` whose last sample is a sampling interval
        old; one never sampled starts from what it holds now (as Kueue's first reconcile)."""
        interval = self.settings.sampling
        for lq in local_queues:
            last = self.last_update.get(lq)
            before = self.consumed.get(lq)
            if last is None:
                # Kueue's first reconcile starts from what is admitted, and a half-life of 0
                # resets that at once
                forgets = self.settings.half_life <= 0
                self.consumed[lq] = {} if forgets else dict(self.admitted.get(lq, {}))
                self.last_update[lq] = now
                self._oldest = None
            elif now - last >= interval:
                self._advance(lq, now)
            else:
                continue
            self.written[lq] = (self.consumed[lq], now)
            self.sampled = True
            if self.consumed[lq] != before:
                self._changed(lq)

    def next_due(self) -> float | None:
        """When the oldest sample is due again."""
        if not self.last_update:
            return None
        if self._oldest is None:
            self._oldest = min(self.last_update.values())
        return self._oldest + self.settings.sampling

    def _changed(self, lq: str) -> None:
        self.changed.add(lq)
        self.version += 1

    def take_changed(self) -> set[str]:
        changed, self.changed = self.changed, set()
        return changed

    # -- reading -------------------------------------------------------------------------
    def amounts(self, lq: str) -> Amounts:
        """Consumed plus pending penalties (what orders the queue)."""
        return merged(self.consumed.get(lq, {}), self.penalties.get(lq, {}))

    def usage(self, lq: str, lq_weight: float) -> float:
        return scalar(self.amounts(lq), self.settings.weights, lq_weight)

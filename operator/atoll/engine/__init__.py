"""Pure admission algorithms over an immutable snapshot: no I/O, no clock, no pydantic.

Admission (Kueue's semantics, whole gangs only):

- `model`: the inputs, frozen dataclasses (ResourceFlavor, ClusterQueue with ResourceGroup /
  FlavorQuotas / ResourceQuota, Cohort, LocalQueue, Workload with PodSet, AdmittedWorkload
  with Admission, FairSharing). Quantities are integers: cpu in milli, memory in bytes.
- `snapshot.build_snapshot(...)` -> `Snapshot`: the quota tree and usage, built once.
- `ordering.select_heads(pending_by_cluster_queue, parked)`: the head of every queue.
- `cycle.run_cycle(snapshot, heads)` -> decisions (`decisions.Admit | Preempt | Pending |
  Evict`), one per head; `cycle.drain(snapshot)` -> Evict for HoldAndDrain and deactivation.
- `Pending.requeue` tells the queue to retry at once or park the workload as inadmissible.

Placement (topology and devices), through the snapshot's `Placer` (`snapshot.placing(snapshot,
placer)` gives a cycle one; without it a cycle admits on quota alone):

- `gangstep.CyclePlacer.on(snapshot, live=..., held=..., memory=..., converter=...)`: one
  cycle's placer, the gangs placed earlier in the cycle taken, each gang asked of the
  `Converter` (the live objects' side) only when quota admits it.

- `gangstep.decide(admit, gang, live=..., held=..., memory=...)` -> `Outcome`: the gang
  placed, pending (fenced, not preemptible, or with hints), waiting for gangs leaving, or a
  Preempt inside one domain; and its nominated domain from now on (`PlacementMemory`).

Internals: quota (hierarchical quota), overlay (copy-on-write usage per cycle), flavors
(flavor assignment), candidates / preemption / targets (classic preemption), fairsharing /
tournament (fair sharing), partial (partial admission), matching (selectors and taints),
inventory / topology / placement / nodefit / placementreasons (placement), domainpreemption
(victims in one domain), topologyflavors (the next flavor when topology refuses), reservedhosts
(backfill's hosts).
"""

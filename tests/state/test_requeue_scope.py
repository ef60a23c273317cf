"""The batched requeue wakes the parked workloads of what changed, as Kueue's requeuer: the
ClusterQueues of one root Cohort's tree, or one ClusterQueue without a Cohort; a change of
capacity or of an object every queue reads wakes every queue."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.api.cohort import Cohort
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import ReclaimablePod
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.inventory import Placement
from atoll.state import afs
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import REQUEUE_BATCH_PERIOD, Cache
from atoll.state.decide import Decider
from tests.control.builders import cluster_queue, gpu_admit, job, workload_for

NOW = 1_796_000_000.0
P = REQUEUE_BATCH_PERIOD
QUEUES = {"a1": "child-a", "a2": "root-a", "b": "co-b", "solo": None}
"""ClusterQueue → its Cohort; `child-a` is a child of `root-a`."""


AFS_QUEUES = ("a1", "a2")
"""The ClusterQueues ordered by LocalQueue usage in `_cache(fair=True)`."""


def _cache(*, fair: bool = False) -> Cache:
    """The queues of `QUEUES`, a LocalQueue `lq-<cq>` for each; with `fair`, Admission Fair
    Sharing, and those of `AFS_QUEUES` ordered by usage with a second LocalQueue each
    (`lq-<cq>-x`)."""
    tracker = afs.Tracker(afs.Settings(half_life=600.0, sampling=60.0)) if fair else None
    cache = Cache(afs=tracker)
    cache.requeue_period = P
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "rf"}}))
    cache.set_cohort(Cohort.from_dict({"metadata": {"name": "root-a"}, "spec": {}}))
    cache.set_cohort(
        Cohort.from_dict({"metadata": {"name": "child-a"}, "spec": {"parentName": "root-a"}})
    )
    for cq, cohort in QUEUES.items():
        spec: dict[str, Any] = {"cohortName": cohort} if cohort else {}
        by_usage = fair and cq in AFS_QUEUES
        if by_usage:
            spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
        cache.set_cluster_queue(cluster_queue(cq, gpus=1, **spec))
        for lq in (f"lq-{cq}", f"lq-{cq}-x") if by_usage else (f"lq-{cq}",):
            cache.set_local_queue(
                LocalQueue.from_dict(
                    {"metadata": {"name": lq, "namespace": "ns"}, "spec": {"clusterQueue": cq}}
                )
            )
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    cache.requeue_due(NOW - P)
    cache.requeue_due(NOW)  # the set-up's own requeue
    assert not cache.requeue_requested
    return cache


def _workload(
    cache: Cache,
    name: str,
    cq: str,
    pods: int = 1,
    created: str = "2026-12-01T00:00:00Z",
    *,
    lq: str | None = None,
) -> str:
    raw = workload_for(job(name, pods=pods), created=created).to_dict()
    raw["spec"]["queueName"] = lq or f"lq-{cq}"
    wl = type(workload_for(job(name))).from_dict(raw)
    cache.set_workload(wl)
    return wls.wl_key(wl)


def _holding(cache: Cache, name: str, cq: str) -> str:
    """A workload assumed admitted in `cq` (its 1 GPU)."""
    key = _workload(cache, name, cq)
    cache.assume(
        key,
        m.Admission(
            cluster_queue=m.ClusterQueueName(cq),
            pod_sets=(
                m.PodSetAssignment(
                    name=m.PodSetName("main"),
                    count=1,
                    flavors=((m.ResourceName("nvidia.com/gpu"), m.FlavorName("rf")),),
                    resource_usage=((m.ResourceName("nvidia.com/gpu"), 1),),
                ),
            ),
        ),
    )
    return key


def _parked_everywhere(cache: Cache) -> dict[str, str]:
    """A parked workload in each ClusterQueue (after the queues placed them)."""
    keys = {cq: _workload(cache, f"w-{cq}", cq) for cq in QUEUES}
    cache.queue_heads(NOW)
    for key in keys.values():
        cache.park(key)
    assert cache.parked_keys() == set(keys.values())
    return keys


def _woken_after_a_period(cache: Cache, t: float = NOW) -> set[str]:
    before = {str(k) for k in cache.parked_keys()}
    cache.queue_heads(t)
    cache.queue_heads(t + P)
    return before - {str(k) for k in cache.parked_keys()}


def test_the_scope_of_a_cluster_queue_is_its_root_cohort_or_itself() -> None:
    cache = _cache()
    assert cache.scope_of("a1") == cache.scope_of("a2") == "co:root-a"
    assert cache.scope_of("b") == "co:co-b"
    assert cache.scope_of("solo") == "cq:solo"
    assert cache.scope_of("missing") == cache.scope_of(None) == "*"


def test_freed_quota_wakes_the_parked_workloads_of_its_cohort_tree_only() -> None:
    cache = _cache()
    holder = _holding(cache, "holder", "a1")
    keys = _parked_everywhere(cache)
    cache.delete_workload(holder)
    assert _woken_after_a_period(cache) == {keys["a1"], keys["a2"]}
    assert cache.parked_keys() == {keys["b"], keys["solo"]}


def test_freed_quota_of_a_cluster_queue_without_a_cohort_wakes_it_alone() -> None:
    cache = _cache()
    holder = _holding(cache, "holder", "solo")
    keys = _parked_everywhere(cache)
    cache.forget(holder)  # its status write failed: the assumed quota is free again
    assert _woken_after_a_period(cache) == {keys["solo"]}


def test_a_released_placement_on_nodes_wakes_every_queue() -> None:
    cache = _cache()
    holder = _holding(cache, "holder", "solo")
    cache.inventory.hold(Placement(gang=holder, pod_sets=()))
    keys = _parked_everywhere(cache)
    cache.delete_workload(holder)
    assert _woken_after_a_period(cache) == set(keys.values())


def test_a_cluster_queue_moving_to_another_cohort_wakes_both_trees() -> None:
    cache = _cache()
    keys = _parked_everywhere(cache)
    cache.set_cluster_queue(cluster_queue("a1", gpus=1, cohortName="co-b"))
    # the queues are rebuilt (a queue object changed); parked workloads stay parked
    assert cache.parked_keys() == set(keys.values())
    assert _woken_after_a_period(cache) == {keys["a1"], keys["a2"], keys["b"]}


def test_a_new_cluster_queue_wakes_every_queue() -> None:
    """Workloads of a LocalQueue whose ClusterQueue did not exist wait in a queue of their
    own; its creation must reach them."""
    cache = _cache()
    keys = _parked_everywhere(cache)
    cache.set_cluster_queue(cluster_queue("new", gpus=1))
    assert _woken_after_a_period(cache) == set(keys.values())


def test_a_parked_workload_that_moves_to_another_queue_stays_parked_until_that_one_wakes() -> None:
    cache = _cache()
    keys = _parked_everywhere(cache)
    key = keys["solo"]
    wl = cache.workloads[key]
    raw = wl.to_dict()
    raw["spec"]["queueName"] = "lq-b"
    raw["metadata"]["resourceVersion"] = "2"
    cache.set_workload(type(wl).from_dict(raw))  # a spec change: tried again at once
    assert key not in cache.parked_keys()
    cache.queue_heads(NOW)
    cache.park(key)
    holder = _holding(cache, "holder", "solo")
    cache.delete_workload(holder)
    assert key not in _woken_after_a_period(cache)  # "solo" was woken, not "b"
    holder = _holding(cache, "holder2", "b")
    cache.delete_workload(holder)
    assert key in _woken_after_a_period(cache, NOW + 2 * P)


def test_a_released_quota_admits_only_in_its_own_tree() -> None:
    """Through the step: a1's freed GPU, all a2's workload lacked, lets it borrow it at
    once; b's parked workload (another tree) is not even tried."""
    cache = _cache()
    holder = _workload(cache, "holder", "a1")
    decider = Decider(cache)
    (admit,) = decider.decide(NOW)
    assert admit.workload == holder
    waiting_a = _workload(cache, "waiting-a", "a2", pods=2)  # its 1 GPU and a1's
    waiting_b = _workload(cache, "waiting-b", "b", pods=2)
    tried = {dec.workload for dec in decider.decide(NOW)}
    assert {waiting_a, waiting_b} <= tried
    assert {waiting_a, waiting_b} <= cache.parked_keys()
    cache.delete_workload(holder)
    (admit,) = decider.decide(NOW + 10)
    assert isinstance(admit, d.Admit)
    assert admit.workload == waiting_a
    assert waiting_b in cache.parked_keys()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.5, 1.0, 2.0]),
            st.sampled_from([*QUEUES, "all", "park", "step"]),
        ),
        max_size=30,
    )
)
def test_a_parked_workload_wakes_exactly_when_a_change_of_its_scope_is_due(
    steps: list[tuple[float, str]],
) -> None:
    """Model: each scope has its own batch (due a period after the first step that saw
    its request); at a step, a parked workload is awake iff a batch of its scope, or of
    every queue, came due since it was parked."""
    cache = _cache()
    keys = _parked_everywhere(cache)
    scope = {cq: cache.scope_of(cq) for cq in QUEUES}
    due: dict[str, float | None] = {}  # the model's requests
    asleep = set(keys)
    t = NOW
    for dt, what in steps:
        t += dt
        if what == "park":
            for cq in QUEUES:
                if keys[cq] not in cache.parked_keys():
                    cache.park(keys[cq])
                    asleep.add(cq)
        elif what == "step":
            for s in [s for s, at in due.items() if at is None]:
                due[s] = t + P
            for s in [s for s, at in due.items() if at is not None and at <= t]:
                del due[s]
                asleep -= {cq for cq in QUEUES if s in ("*", scope[cq])}
            cache.queue_heads(t)
            assert {cq for cq in QUEUES if keys[cq] in cache.parked_keys()} == asleep
        else:
            s = scope[what] if what != "all" else "*"
            due.setdefault(s, None)
            cache.bump(s)


def _pending(cache: Cache, key: str, cq: str, lack: int, *, maximum: int = 8) -> d.Pending:
    return d.Pending(
        workload=m.WorkloadKey(key),
        cluster_queue=m.ClusterQueueName(cq),
        reason=d.PendingReason.WAITING_FOR_QUOTA,
        message="insufficient unused quota",
        requeue=d.Requeue.INADMISSIBLE,
        shortfalls=(
            d.Shortfall(
                flavor=m.FlavorName("rf"),
                resource=m.ResourceName("nvidia.com/gpu"),
                needed=lack,
                available=0,
                maximum=maximum,
            ),
        ),
    )


def _parked_lacking(cache: Cache, name: str, cq: str, lack: int, minute: int = 0, **kw: Any) -> str:
    key = _workload(cache, name, cq, pods=lack, created=f"2026-12-01T00:{minute:02d}:00Z")
    cache.queue_heads(NOW)
    cache.park(key, _pending(cache, key, cq, lack, **kw))
    return key


def _released(cache: Cache, cq: str, gpus: int) -> None:
    holder = _holding(cache, f"holder-{cq}-{gpus}-{len(cache.workloads)}", cq)
    adm = cache.assumed[holder]
    (ps,) = adm.pod_sets
    cache.assumed[holder] = m.Admission(
        cluster_queue=adm.cluster_queue,
        pod_sets=(
            m.PodSetAssignment(
                name=ps.name, count=gpus, flavors=ps.flavors,
                resource_usage=((m.ResourceName("nvidia.com/gpu"), gpus),),
            ),
        ),
    )  # fmt: skip
    cache.delete_workload(holder)


def test_freed_quota_wakes_at_once_whom_it_covers_in_queue_order() -> None:
    cache = _cache()
    first = _parked_lacking(cache, "first", "a2", 4, minute=1)
    second = _parked_lacking(cache, "second", "a2", 4, minute=2)
    small = _parked_lacking(cache, "small", "a2", 2, minute=3)
    _released(cache, "a2", 4)
    cache.queue_heads(NOW)  # the next step, no batch period later
    assert cache.parked_keys() == {second, small}  # 4 GPUs: the first one's lack
    assert first not in cache.parked_keys()
    _released(cache, "a2", 2)
    cache.queue_heads(NOW)
    assert cache.parked_keys() == {second, small}  # `small` does not go ahead of `second`
    _released(cache, "a2", 3)
    _released(cache, "a2", 3)
    cache.queue_heads(NOW)
    assert cache.parked_keys() == frozenset()  # 6 GPUs since the last step: both


def test_each_cluster_queue_of_a_tree_takes_from_the_whole_release() -> None:
    """A release wakes the first covered workload of every ClusterQueue of its tree, not
    only the oldest one: the cycle then picks among them as Kueue's does (non-borrowing
    first). Sharing one amount in queue order gave a queue's own quota, just released, to an
    older workload of another queue that would borrow it, and the queue's own workload then
    reclaimed it at once, evicting the borrower right after its admission."""
    cache = _cache()
    older = _parked_lacking(cache, "older", "a1", 4, minute=1)
    newer = _parked_lacking(cache, "newer", "a2", 4, minute=2)
    small = _parked_lacking(cache, "small", "a2", 2, minute=3)
    other = _parked_lacking(cache, "other", "b", 1, minute=0)
    _released(cache, "a2", 4)
    cache.queue_heads(NOW)
    # both queues' first: a1's older one and a2's `newer` (a2's share went to it, so its
    # `small` waits); `b` is another tree
    assert cache.parked_keys() == {small, other}
    assert {older, newer}.isdisjoint(cache.parked_keys())


def test_a_queue_s_released_quota_goes_to_its_own_workload_not_to_a_borrower() -> None:
    """Through the step: p and q (2 GPUs each, one Cohort, reclamation allowed) are full, and
    each has a parked 2-GPU workload, q's the older. p's holder finishes. q's would borrow
    p's quota, p's would not: as in Kueue's cycle (non-borrowing first), p's is admitted,
    and nothing is evicted later. (Woken alone, q's borrowed it, and p's reclaimed the quota
    at the next batch, evicting a workload of q.)"""
    cache = Cache()
    cache.requeue_period = P
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "rf"}}))
    for cq in ("p", "q"):
        spec = {"cohortName": "co", "preemption": {"reclaimWithinCohort": "Any"}}
        cache.set_cluster_queue(cluster_queue(cq, gpus=2, **spec))
        cache.set_local_queue(
            LocalQueue.from_dict(
                {"metadata": {"name": f"lq-{cq}", "namespace": "ns"}, "spec": {"clusterQueue": cq}}
            )
        )
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    decider = Decider(cache)
    holders = {cq: _workload(cache, f"holder-{cq}", cq, pods=2) for cq in ("p", "q")}
    assert {dec.workload for dec in decider.decide(NOW) if isinstance(dec, d.Admit)} == set(
        holders.values()
    )
    older = _workload(cache, "older-q", "q", pods=2, created="2026-12-01T00:01:00Z")
    newer = _workload(cache, "newer-p", "p", pods=2, created="2026-12-01T00:02:00Z")
    decider.decide(NOW + 1)
    assert {older, newer} <= cache.parked_keys()
    cache.delete_workload(holders["p"])
    decisions = decider.decide(NOW + 2)
    admitted = [dec for dec in decisions if isinstance(dec, d.Admit)]
    assert [a.workload for a in admitted] == [newer]
    assert not admitted[0].borrowing
    later = [dec for t in (3, 4, 5, 6) for dec in decider.decide(NOW + 2 + t * P)]
    assert not [dec for dec in later if isinstance(dec, (d.Preempt, d.Admit))]
    assert older not in cache.assumed  # the Cohort is full: it waits


def test_a_release_too_small_for_the_first_in_queue_order_waits_for_the_batch() -> None:
    cache = _cache()
    first = _parked_lacking(cache, "first", "a1", 4, minute=1)
    second = _parked_lacking(cache, "second", "a2", 1, minute=2)
    _released(cache, "a1", 3)
    cache.queue_heads(NOW)
    assert cache.parked_keys() == {first, second}
    cache.queue_heads(NOW + P)
    assert cache.parked_keys() == frozenset()


def test_a_workload_over_its_maximum_or_in_another_tree_is_not_woken_early() -> None:
    cache = _cache()
    never = _parked_lacking(cache, "never", "a1", 4, maximum=2)
    other = _parked_lacking(cache, "other", "b", 1)
    _released(cache, "a1", 8)
    cache.queue_heads(NOW)
    assert cache.parked_keys() == {never, other}


def test_what_a_workload_lacked_is_forgotten_when_it_is_woken_or_admitted() -> None:
    cache = _cache()
    key = _parked_lacking(cache, "w", "a1", 4)
    assert cache.lack_scope == {key: "co:root-a"}
    _released(cache, "a1", 1)
    cache.queue_heads(NOW)
    cache.queue_heads(NOW + P)  # the batch wakes it
    assert not cache.lack_scope
    assert not any(cache.lacks.values())
    cache.park(key, _pending(cache, key, "a1", 4))
    assert cache.lack_scope == {key: "co:root-a"}
    _released(cache, "a1", 1)
    cache.queue_heads(NOW + P)  # a second walk on the same stamp: the order is kept
    assert cache._lack_orders
    cache.assume(key, m.Admission(cluster_queue=m.ClusterQueueName("a1"), pod_sets=()))
    assert not cache.lack_scope
    _released(cache, "a1", 1)
    cache.queue_heads(NOW + P)  # nothing left to keep in order: the next release drops it
    assert not cache._lack_orders
    assert not cache._lack_entry


def test_a_what_if_copy_wakes_early_without_touching_the_original() -> None:
    cache = _cache()
    key = _parked_lacking(cache, "w", "a1", 4)
    decider = Decider(cache)
    _released(cache, "a1", 4)
    copy = decider.fork()
    copy.cache.queue_heads(NOW)
    assert key not in copy.cache.parked_keys()
    assert key in cache.parked_keys()
    assert cache.lack_scope == {key: "co:root-a"}
    assert cache.freed
    cache.queue_heads(NOW)
    assert key not in cache.parked_keys()


def test_pods_reclaimed_by_a_running_workload_wake_its_tree_and_free_their_share() -> None:
    cache = _cache()
    key = _workload(cache, "runner", "a1", pods=2)
    admit = gpu_admit(key, gpus=2, cq="a1", flavor="rf")
    running = lc.applied(cache.workloads[key], lc.admit(admit, datetime.datetime.now(datetime.UTC)))
    cache.set_workload(running)
    keys = _parked_everywhere(cache)
    cache.requeue_due(NOW)
    cache.requeue_due(NOW + P)
    assert not cache.freed
    one_done = lc.applied(running, lc.reclaimable((ReclaimablePod(name="main", count=1),)))
    cache.set_workload(one_done)
    assert cache.freed == {"co:root-a": {("rf", "nvidia.com/gpu"): 1}}
    assert _woken_after_a_period(cache, NOW + 2 * P) == {keys["a1"], keys["a2"]}
    now = datetime.datetime.now(datetime.UTC)
    again = lc.applied(one_done, lc.set_condition("Other", True, "R", "m", now))
    cache.set_workload(again)  # the same reclaimable pods: nothing freed again
    assert not cache.freed


def test_a_parked_workload_whose_reclaimable_pods_change_is_tried_again_at_once() -> None:
    # Kueue's PushOrUpdate: a pending Workload whose reclaimable pods changed asks for
    # fewer pods now, so it leaves the inadmissible ones; nothing else is woken
    cache = _cache()
    keys = _parked_everywhere(cache)
    key = keys["a1"]
    wl = cache.workloads[key]
    cache.set_workload(lc.applied(wl, lc.set_condition("Other", True, "R", "m", _now())))
    assert cache.parked_keys() == set(keys.values())  # another status change: still parked
    fewer = lc.applied(
        cache.workloads[key], lc.reclaimable((ReclaimablePod(name="main", count=1),))
    )
    cache.set_workload(fewer)
    assert cache.parked_keys() == set(keys.values()) - {key}
    assert not cache.freed  # it held no quota: nothing was given back
    ew = cache.engine_workload(key)
    assert ew is not None
    assert [ps.count for ps in ew.pod_sets] == [0]  # its one pod is done


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


_LACK_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("park"), st.integers(0, 7), st.integers(1, 4), st.integers(0, 59)),
        st.tuples(st.just("class"), st.integers(0, 7), st.integers(1, 4), st.integers(0, 0)),
        st.tuples(st.just("moved"), st.integers(0, 7), st.integers(0, 59), st.integers(0, 0)),
        st.tuples(st.just("release"), st.integers(0, 2), st.integers(1, 4), st.integers(0, 0)),
        st.tuples(st.just("delete"), st.integers(0, 7), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("batch"), st.integers(0, 0), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("fork"), st.integers(0, 0), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("usage"), st.integers(0, 3), st.integers(0, 8), st.integers(0, 0)),
        st.tuples(st.just("walk"), st.integers(0, 0), st.integers(0, 0), st.integers(0, 0)),
    ),
    max_size=40,
)


@settings(max_examples=2000, deadline=None)
@given(_LACK_OPS, st.booleans(), st.booleans())
def test_the_kept_order_of_lacks_is_always_the_queue_order(
    ops: list[tuple[str, int, int, int]], fair: bool, eager: bool
) -> None:
    """The order kept between releases (`Cache._lacking_in_order`) is exactly
    `sorted(records, key=queue order)` whatever happened since: records made one at a time
    or for a whole class, workloads whose queue order moved (a new creation time), releases
    that walk and wake, deletions, a batch that drops a scope's records, what-if copies;
    with Admission Fair Sharing, LocalQueues whose usage changed (their workloads move
    together). Each release wakes whom the queue order says it covers. The whole order is
    read after every step (`eager`), or only at `walk` steps, so that changes pile up
    between two reads as they do between two releases."""
    cache = _cache(fair=fair)
    cqs = ("a1", "a2", "b")
    t = NOW
    seeded = 0.0
    for op, i, n, minute in ops:
        name, cq = f"w{i}", cqs[i % 3]
        key = f"ns/{name}"
        lq = f"lq-{cq}-x" if fair and cq in AFS_QUEUES and i >= 4 else f"lq-{cq}"
        if op == "park" or (op == "moved" and key in cache.workloads):
            lack = n if op == "park" else 1
            created = f"2026-12-01T00:{minute if op == 'park' else n:02d}:00Z"
            key = _workload(cache, name, cq, pods=lack, created=created, lq=lq)
            cache.queue_heads(t)
            if op == "park":
                cache.park(key, _pending(cache, key, cq, lack))
        elif op == "class":
            keys = [k for k in cache.workloads if k.startswith("ns/w") and k not in cache.assumed]
            cache.note_lacks(keys, _pending(cache, key, cq, n))
        elif op == "release":
            _released(cache, cqs[i], n)
            before, want_woken = set(cache.lack_scope), _woken_by_release(cache)
            cache.queue_heads(t)
            assert before - set(cache.lack_scope) == want_woken
        elif op == "delete" and key in cache.workloads:
            cache.delete_workload(key)
        elif op == "batch":
            t += P
            cache.queue_heads(t)
        elif op == "fork":
            cache = cache.fork()
        elif op == "usage" and cache.afs is not None:
            seeded += 1  # a newer sample than any before: it is taken
            used = cqs[i % 2] + ("-x" if i >= 2 else "")
            cache.afs.seed(f"ns/lq-{used}", {"nvidia.com/gpu": n * 1000}, t + seeded)
            cache.queue_heads(t)
        if eager or op == "walk":
            _walk_all(cache)
    _walk_all(cache)


def _walk_all(cache: Cache) -> None:
    for scope, records in cache.lacks.items():
        want = sorted(records, key=cache._order)
        assert list(cache._lacking_in_order(scope, records)) == want


def _woken_by_release(cache: Cache) -> set[str]:
    """Whom the quota released since the last step wakes (`Cache._wake_fitting`), worked
    out from `sorted(records, key=queue order)` instead of the kept order."""
    woken = set()
    for scope, amounts in cache.freed.items():
        records = cache.lacks.get(scope) or {}
        shares: dict[str, dict[tuple[str, str], int]] = {}
        for key in sorted(records, key=cache._order):
            wl = cache.workloads[key]
            cq = cache.local_queues[f"{wl.namespace}/{wl.spec.queue_name}"].spec.cluster_queue
            left = shares.setdefault(cq, dict(amounts))  # each queue takes from all of it
            fits = [
                (flavor, need)
                for flavor, need in records[key]
                if all(lack <= left.get((flavor, r), 0) for r, lack in need)
            ]
            if not fits:
                break
            flavor, need = fits[0]
            for r, lack in need:
                left[(flavor, r)] -= lack
            woken.add(key)
    return woken

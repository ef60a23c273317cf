"""bench/kueue_baseline/runner.py without a cluster: the runner's watch, finish and un-reserve
driven by crafted Workload histories against an in-memory API (resourceVersions, merge-patched
status guarded by the resourceVersion, a watch that can lag or end in 410 Gone).

Each history is one way an Admitted Workload was left never Finished before the runner's sweep
(the first one is what the Kueue run of 2026-12-06 10:51 did: 1,499 of 1,500 Finished, one
`other` change and one eviction counted as an admission on the watch)."""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "kueue_baseline"))

import generator as gen
from kubeclient import ApiError
from runner import ROUND_GAP_S, WORKLOADS, Runner, WorkloadRecord, preemption_rounds

NS = "cq-0-3-cohort-3"
NAME = "small-0-32-0"
RUNTIME_MS = 200


def _conditions(*true: str, **false: str) -> list[dict[str, Any]]:
    """Conditions with status True for `true`, False (with the given reason) for `false`."""
    out = [{"type": t, "status": "True", "reason": t, "message": ""} for t in true]
    out += [{"type": t, "status": "False", "reason": r, "message": ""} for t, r in false.items()]
    return out


PENDING = _conditions(QuotaReserved="Pending")
ADMITTED = _conditions("QuotaReserved", "Admitted")
# Kueue's eviction (preemption) apply: the quota is still reserved
PREEMPTED = _conditions("QuotaReserved", "Admitted", "Evicted", "Preempted")
# the runner's un-reserve of an evicted Workload
UNRESERVED = _conditions("Evicted", "Preempted", QuotaReserved="Pending", Admitted="NoReservation")
# Kueue's re-admission: Evicted and Preempted reset to False
READMITTED = _conditions("QuotaReserved", "Admitted", Evicted="QuotaReserved")


class FakeApi:
    """An in-memory Workload API with what the runner relies on: every write bumps a global
    resourceVersion and is an event on the watch; the runner's status merge patches carry the
    resourceVersion they were based on and get 409 when it is stale. The test plays the
    controller with `write` (no precondition, like Kueue's loose server-side applies) and can
    hold the watch back (`held`: events wait, as when the watch lags), end it with 410 Gone
    (`gone`: the held events are lost, the runner has to re-list), hold the runner's writes
    (`patch_gate`, a slow API server) or fail them (`patch_failures`)."""

    def __init__(self) -> None:
        self.rv = 0
        self.objs: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[int, str, dict[str, Any]]] = []
        self.held = False
        self.gone = False
        self.patch_gate: asyncio.Event | None = None
        self.patch_failures: list[int] = []
        self.patches: list[tuple[float, list[str]]] = []
        """The runner's applied status patches: when, and the conditions True after it."""
        self._changed = asyncio.Event()

    def _commit(self, name: str, kind: str) -> dict[str, Any]:
        self.rv += 1
        obj = self.objs[name]
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, kind, copy.deepcopy(obj)))
        self._changed.set()
        return copy.deepcopy(obj)

    def create(self, name: str = NAME) -> None:
        wl = gen.workload(name, NS, gen.baseline().classes[0])
        wl["metadata"]["labels"][gen.RUNTIME_LABEL] = str(RUNTIME_MS)
        wl["metadata"]["uid"] = f"uid-{name}"
        self.objs[name] = wl
        self._commit(name, "ADDED")

    def write(self, conditions: list[dict[str, Any]], name: str = NAME) -> None:
        self.objs[name]["status"] = {"conditions": copy.deepcopy(conditions)}
        self._commit(name, "MODIFIED")

    def release(self) -> None:
        """Deliver what the watch held back (or, with `gone` set, lose it)."""
        self.held = False
        self._changed.set()

    def true(self, name: str = NAME) -> set[str]:
        conds = (self.objs[name].get("status") or {}).get("conditions") or []
        return {c["type"] for c in conds if c["status"] == "True"}

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        """KubeClient.request's calls the runner makes: list, get, status merge patch."""
        if method == "GET" and path == WORKLOADS:
            items = [copy.deepcopy(o) for o in self.objs.values()]
            return {"metadata": {"resourceVersion": str(self.rv)}, "items": items}
        if method == "GET":
            return copy.deepcopy(self.objs[path.rsplit("/", 1)[1]])
        assert method == "PATCH"
        assert path.endswith("/status")
        assert kw["content_type"] == "application/merge-patch+json"
        if self.patch_gate is not None:
            await self.patch_gate.wait()
        if self.patch_failures:
            raise ApiError(self.patch_failures.pop(0), "injected by the test")
        name = path.rsplit("/", 2)[1]
        obj = self.objs[name]
        if body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        status = dict(obj.get("status") or {})
        for key, value in body["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        obj["status"] = status
        written = self._commit(name, "MODIFIED")
        self.patches.append((time.monotonic(), sorted(self.true(name))))
        return written

    async def watch(
        self, path: str, resource_version: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        assert path == WORKLOADS
        rv = int(resource_version)
        while True:
            self._changed.clear()
            if self.gone and not self.held:
                self.gone = False
                yield {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
                return
            for ev_rv, kind, obj in list(self.log):
                if self.held:
                    break
                if ev_rv > rv:
                    rv = ev_rv
                    yield {"type": kind, "object": copy.deepcopy(obj)}
            await self._changed.wait()


async def until(what: str, cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for `cond` (a guard against hanging, not a speed limit)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.01)


def _record(runner: Runner) -> WorkloadRecord:
    (rec,) = (r for r in runner.records.values() if r.name == NAME)
    return rec


async def _past_due(rec: WorkloadRecord) -> None:
    """Until the pending finish has woken and decided (its due time is past)."""
    await until("a finish is scheduled", lambda: rec.finish_due is not None)
    due = rec.finish_due
    assert due is not None
    await until("the due time passes", lambda: time.monotonic() > due + 0.05)
    await asyncio.sleep(0.05)


def _drive(
    story: Callable[[FakeApi, Runner], Coroutine[Any, Any, None]],
) -> tuple[FakeApi, dict[str, Any]]:
    async def main() -> tuple[FakeApi, dict[str, Any]]:
        api = FakeApi()
        runner = Runner(api, gen.baseline(1 / 350))  # type: ignore[arg-type]
        runner.sweep_s = 0.05
        api.create()
        api.write(PENDING)
        watch = asyncio.create_task(runner.run())
        try:
            await until("the runner sees the Workload", lambda: bool(runner.records))
            await story(api, runner)
            await until("Finished is written", lambda: "Finished" in api.true())
            await until("Finished is seen on the watch", lambda: runner.finished == 1)
            if watch.done():
                watch.result()
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await runner.close()
        return api, runner.summary()

    return asyncio.run(main())


def test_eviction_withdrawn_while_admitted_is_still_finished() -> None:
    """Kueue's preemption apply lands before its (asynchronous) admission apply: one event
    shows the Workload admitted and evicted at once. The runner's un-reserve is slow (busy API
    server), so the finish wakes on the evicted view and gives up. Then the admission apply
    lands; from the same field manager, it drops the Evicted and Preempted conditions it does
    not carry: the Workload is Admitted and not Evicted again without ever having been
    un-admitted, so no new running period starts on the watch; the un-reserve meets a 409 and
    a Workload that is no longer evicted, and stops."""

    async def story(api: FakeApi, runner: Runner) -> None:
        api.patch_gate = asyncio.Event()
        api.write(PREEMPTED)
        await until("the runner sees it evicted", lambda: _record(runner).evicted)
        api.held = True
        await _past_due(_record(runner))
        api.write(ADMITTED)
        api.patch_gate.set()
        api.release()

    api, s = _drive(story)
    # the run's fingerprint on the watch: the eviction came with the admission (counted as
    # `admit`, 1 eviction but no `evict` change), and its withdrawal is an `other` change
    assert s["workload_changes"] == {"admit": 1, "other": 1, "finish": 1}
    assert s["classes"]["small"]["evictions"] == 1
    assert s["runner_rescued"] == {"finish": 1}
    assert s["runner_rescued_workloads"] == [f"finish {NS}/{NAME} after admit other"]
    assert [true for _, true in api.patches] == [["Admitted", "Finished", "QuotaReserved"]]


def test_history_coalesced_by_a_relist_is_still_finished() -> None:
    """The watch lags while the Workload is preempted, un-reserved by the runner and
    re-admitted by Kueue; then it ends in 410 Gone. The finish woke in between on the evicted
    or un-reserved state and stopped; the re-list shows the Workload Admitted again, which
    looks like the running period the runner already had, so nothing started a new finish."""

    async def story(api: FakeApi, runner: Runner) -> None:
        rec = _record(runner)
        api.create("small-0-33-0")  # one the re-list shows unchanged: no event, no change
        api.write(ADMITTED)
        await until("a finish is scheduled", lambda: rec.finish_due is not None)
        api.patch_gate = asyncio.Event()
        api.write(PREEMPTED)
        await until("the runner sees it evicted", lambda: rec.evicted)
        api.held = True
        api.patch_gate.set()
        await until("the runner un-reserves it", lambda: "QuotaReserved" not in api.true())
        await _past_due(rec)
        api.write(READMITTED)
        api.gone = True
        api.release()
        await until("the runner re-lists", lambda: rec.seen["status"]["conditions"] == READMITTED)

    api, s = _drive(story)
    assert s["watch_relists"] == 1
    assert s["workload_changes"] == {"admit": 1, "evict": 1, "other": 1, "finish": 1}
    # listed pending, the second's create, admitted, evicted, re-listed, Finished
    assert s["workload_events"] == 6
    assert s["runner_rescued"] == {"finish": 1}
    assert [true for _, true in api.patches] == [
        ["Evicted", "Preempted"],
        ["Admitted", "Finished", "QuotaReserved"],
    ]


@pytest.mark.parametrize(
    "failures",
    [
        pytest.param([500], id="server-error"),
        pytest.param([409] * 20, id="twenty-conflicts"),
    ],
)
def test_finish_that_failed_is_tried_again(failures: list[int]) -> None:
    """The Finished write fails (an API server error, or a conflict 20 times in a row): the
    task ended with an error in a list nobody printed, and nothing tried again."""

    async def story(api: FakeApi, runner: Runner) -> None:
        api.patch_failures = list(failures)
        api.write(ADMITTED)

    api, s = _drive(story)
    assert s["runner_error_count"] == 1
    assert s["runner_errors"][0].startswith(f"finish {NS}/{NAME}: ")
    assert s["runner_rescued"] == {"finish": 1}
    assert len(api.patches) == 1


def test_unreserve_that_failed_is_tried_again() -> None:
    """The un-reserve of an evicted Workload fails: it stays evicted with its quota reserved,
    Kueue never admits it again, and it is never Finished."""

    async def story(api: FakeApi, runner: Runner) -> None:
        api.held = True  # both in one batch: the un-reserve writes first, the finish waits
        api.write(ADMITTED)
        api.write(PREEMPTED)
        api.patch_failures = [500]
        api.release()
        await until("the runner un-reserves it", lambda: "QuotaReserved" not in api.true())
        api.write(READMITTED)

    api, s = _drive(story)
    assert s["runner_errors"][0].startswith(f"unreserve {NS}/{NAME}: ")
    assert s["runner_rescued"] == {"unreserve": 1}
    assert [true for _, true in api.patches] == [
        ["Evicted", "Preempted"],
        ["Admitted", "Finished", "QuotaReserved"],
    ]


def test_sweep_leaves_to_the_watch_what_a_reread_saw_first() -> None:
    """The finish's conflict re-read shows the eviction before the watch does: the sweep does
    not un-reserve ahead of the watch (that would move the un-reserve earlier than in a run
    without the sweep); the eviction's event starts it, as always."""
    released: dict[str, float] = {}

    async def story(api: FakeApi, runner: Runner) -> None:
        rec = _record(runner)
        api.write(ADMITTED)
        await until("a finish is scheduled", lambda: rec.finish_due is not None)
        api.held = True
        api.write(PREEMPTED)
        await until("the finish re-reads after a conflict", lambda: runner.conflicts == 1)
        await until("it sees the eviction", lambda: rec.obj["status"]["conditions"] == PREEMPTED)
        sweeps = runner.sweeps
        await until("the sweep runs", lambda: runner.sweeps > sweeps + 1)
        assert api.patches == []
        released["at"] = time.monotonic()
        api.release()
        await until("the runner un-reserves it", lambda: "QuotaReserved" not in api.true())
        api.write(READMITTED)

    api, s = _drive(story)
    assert s["runner_rescued"] == {}
    (unreserved, true), _ = api.patches
    assert true == ["Evicted", "Preempted"]
    assert unreserved >= released["at"]


def test_a_plain_run_is_finished_once_at_admission_plus_run_time() -> None:
    """What the benchmark measures is unchanged: the sweep runs all along, finds the finish
    pending and writes nothing; the one Finished comes no earlier than the admission seen on
    the watch plus the run time."""
    seen: dict[str, float] = {}

    async def story(api: FakeApi, runner: Runner) -> None:
        api.write(ADMITTED)
        rec = _record(runner)
        await until("the runner sees the admission", lambda: rec.running_since is not None)
        assert rec.running_since is not None
        seen["admitted"] = rec.running_since
        sweeps = runner.sweeps
        await until("the sweep runs", lambda: runner.sweeps > sweeps + 1)

    api, s = _drive(story)
    ((written, true),) = api.patches
    assert true == ["Admitted", "Finished", "QuotaReserved"]
    assert written >= seen["admitted"] + RUNTIME_MS / 1000
    assert s["runner_rescued"] == {}
    assert s["runner_error_count"] == 0
    assert s["workload_changes"] == {"admit": 1, "finish": 1}


def test_evictions_are_counted_by_who_made_room_for_whom() -> None:
    """An eviction is counted by the evicted class, the preemptor's class (found by the UID
    the Evicted message names) and the Preempted reason; the preemptor is counted once, with
    one round of preemption."""
    big = "large-0-3-0"

    async def story(api: FakeApi, runner: Runner) -> None:
        api.objs[big] = gen.workload(big, NS, gen.baseline().classes[2])
        api.objs[big]["metadata"]["uid"] = f"uid-{big}"
        api._commit(big, "ADDED")
        await until("the runner sees the preemptor", lambda: len(runner.records) == 2)
        api.write(ADMITTED)
        preempted = copy.deepcopy(PREEMPTED)
        for c in preempted:
            if c["type"] == "Evicted":
                c["reason"] = "Preempted"
                c["message"] = (
                    f"Preempted to accommodate a workload (UID: uid-{big}, JobUID: UNKNOWN) "
                    "due to prioritization in the ClusterQueue; preemptor path: /cq; "
                    "preemptee path: /cq"
                )
            if c["type"] == "Preempted":
                c["reason"] = "InClusterQueue"
        api.write(preempted)
        await until("the runner un-reserves it", lambda: "QuotaReserved" not in api.true())
        api.write(READMITTED)

    _, s = _drive(story)
    assert s["eviction_kinds"] == {"small by large, InClusterQueue": 1}
    assert (s["preemptors"], s["preemption_rounds"]) == (1, 1)


def test_preemption_rounds_split_at_gaps() -> None:
    assert preemption_rounds([]) == 0
    assert preemption_rounds([5.0, 5.1, 5.0 + ROUND_GAP_S]) == 1
    assert preemption_rounds([9.0, 1.0, 1.2, 9.1]) == 2
    assert preemption_rounds([1.0, 1.0 + 2 * ROUND_GAP_S, 1.0 + 4 * ROUND_GAP_S]) == 3

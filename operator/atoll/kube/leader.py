"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection: acquire
when the lease is free or expired, renew every retry period, give up (and stop leading) when a
renewal has not succeeded within the renew deadline, release on a clean shutdown. Losing the
lease does not end the process: the replica follows again and competes for the lease anew."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube import retry
from atoll.kube.rest import LEASES, NAMESPACES, Rest, decode

log = structlog.get_logger("atoll.leader")


class LeadershipLostError(RuntimeError):
    """The lease could not be renewed in time: another replica may be leading now."""


class LeaseNamespaceMissingError(RuntimeError):
    """The Lease's namespace does not exist and may not be created."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(raw: str | None) -> dt.datetime | None:
    if not raw:
        return None
    return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))


NOT_READ_YET = "the Lease was not read yet"


class LeaderElector:
    """Takes and renews the Lease; `healthy()` says whether this replica leads or follows a
    Lease it can read (what `/readyz` reports), `problem` why not."""

    def __init__(self, api: client.ApiClient, settings: LeaseSettings) -> None:
        self.rest = Rest(api)
        self.s = settings
        self.is_leader = False
        self.problem: str | None = NOT_READ_YET
        self._seen: float | None = None

    @property
    def tried(self) -> bool:
        """Whether the Lease was tried at all (read, taken, or failed with a reason)."""
        return self.is_leader or self._seen is not None or self.problem != NOT_READ_YET

    @property
    def lease(self) -> str:
        return f"{self.s.namespace}/{self.s.name}"

    async def _read(self) -> dict[str, Any]:
        path = LEASES.path(self.s.namespace, self.s.name)
        raw: dict[str, Any] = decode(await self.rest.request("GET", path, limit=self._limit))
        return raw

    async def _replace(self, raw: dict[str, Any]) -> None:
        path = LEASES.path(self.s.namespace, self.s.name)
        await self.rest.request("PUT", path, raw, limit=self._limit)

    @property
    def _limit(self) -> float:
        """Each Lease request is bounded by the renew deadline (as client-go bounds each
        attempt): a hung connection must not outlast it, or the deadline check never runs."""
        return self.s.renew_deadline

    def healthy(self) -> bool:
        """Leading, or following a Lease read successfully within the lease duration."""
        if self.is_leader:
            return True
        now = asyncio.get_running_loop().time()
        return self._seen is not None and now - self._seen <= self.s.lease_duration

    def _spec(self, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        now = _fmt(_now())
        return {
            "holderIdentity": self.s.identity,
            "leaseDurationSeconds": int(self.s.lease_duration),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _create(self) -> bool:
        body = {
            "metadata": {"name": self.s.name, "namespace": self.s.namespace},
            "spec": self._spec(0),
        }
        try:
            await self.rest.request("POST", LEASES.path(self.s.namespace), body, limit=self._limit)
        except ApiException as e:
            if e.status == 409:
                return False
            if e.status != 404:
                raise
            await self._create_namespace()
            return False  # the next attempt creates the Lease
        return True

    async def _create_namespace(self) -> None:
        """The Lease's namespace does not exist: create it if RBAC lets us, else say which
        namespace is missing."""
        ns = self.s.namespace
        try:
            body = {"metadata": {"name": ns}}
            await self.rest.request("POST", NAMESPACES.path(None), body, limit=self._limit)
            log.info("created the Lease namespace", namespace=ns)
        except ApiException as e:
            if e.status == 409:
                return
            if e.status == 403:
                raise LeaseNamespaceMissingError(
                    f"the Lease namespace {ns} does not exist and atoll may not create it: "
                    "create it, or set leaderElection.resourceNamespace"
                ) from e
            raise

    async def _try(self) -> bool:
        """One attempt to acquire or renew; True when we hold the lease afterwards."""
        try:
            raw = await self._read()
        except ApiException as e:
            if e.status != 404:
                raise
            return await self._create()
        self._seen = asyncio.get_running_loop().time()
        spec = raw.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.s.lease_duration)
        expired = renewed is None or (_now() - renewed).total_seconds() > duration
        mine = holder == self.s.identity
        if not (mine or not holder or expired):
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        raw["spec"] = self._spec(transitions, spec.get("acquireTime") if mine else None)
        try:
            await self._replace(raw)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    async def _attempt(self) -> bool:
        """`_try`, with any failure recorded in `problem` (logged when it changes): the
        caller tries again after the retry period, whatever went wrong."""
        try:
            ok = await self._try()
        except Exception as e:
            problem = str(e) if isinstance(e, LeaseNamespaceMissingError) else retry.describe(e)
            if problem != self.problem:
                log.warning("lease not reachable", lease=self.lease, error=problem)
            self.problem = problem
            return False
        if ok:
            self._seen = asyncio.get_running_loop().time()
        self.problem = None
        return ok

    async def _acquire(self) -> None:
        while True:
            if await self._attempt():
                return
            await asyncio.sleep(self.s.retry_period)

    async def _renew(self) -> None:
        last = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.s.retry_period)
            now = asyncio.get_running_loop().time()
            if await self._attempt():
                last = now
            elif now - last > self.s.renew_deadline:
                raise LeadershipLostError(f"lease {self.lease} not renewed")

    async def release(self) -> None:
        if not self.is_leader:
            return
        try:
            raw = await self._read()
            if (raw.get("spec") or {}).get("holderIdentity") == self.s.identity:
                raw["spec"]["holderIdentity"] = ""
                await self._replace(raw)
        except Exception as e:
            log.warning("lease release failed", lease=self.lease, error=retry.describe(e))
        self.is_leader = False

    async def lead(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Forever: wait for the lease, then run `work` while renewing it. When a renewal
        fails for longer than the renew deadline, `work` is cancelled and this replica
        follows again until it wins the lease back."""
        while True:
            await self._acquire()
            self.is_leader = True
            log.info("became leader", lease=self.lease, id=self.s.identity)
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._renew())
                    tg.create_task(work())
            except* LeadershipLostError:
                self.is_leader = False  # (still True when cancelled: `release` gives it up)
                log.warning("leadership lost, following again", lease=self.lease)

"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection: acquire
when the lease is free or expired, renew every retry period, give up (and stop leading) when a
renewal has not succeeded within the renew deadline, release on a clean shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = structlog.get_logger("atoll.leader")


class LeadershipLostError(RuntimeError):
    """The lease could not be renewed in time: another replica may be leading now."""


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


class LeaderElector:
    def __init__(self, api: client.ApiClient, settings: LeaseSettings) -> None:
        self.api = client.CoordinationV1Api(api)
        self.s = settings
        self.is_leader = False

    def _spec(self, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        now = _fmt(_now())
        return {
            "holderIdentity": self.s.identity,
            "leaseDurationSeconds": int(self.s.lease_duration),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try(self) -> bool:
        """One attempt to acquire or renew; True when we hold the lease afterwards."""
        try:
            lease = await self.api.read_namespaced_lease(self.s.name, self.s.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "metadata": {"name": self.s.name, "namespace": self.s.namespace},
                "spec": self._spec(0),
            }
            try:
                await self.api.create_namespaced_lease(self.s.namespace, body)
            except ApiException as create_error:
                if create_error.status == 409:
                    return False
                raise
            return True
        raw = self.api.api_client.sanitize_for_serialization(lease)
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
            await self.api.replace_namespaced_lease(self.s.name, self.s.namespace, raw)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    async def _acquire(self) -> None:
        while True:
            try:
                if await self._try():
                    return
            except ApiException as e:
                log.warning("lease acquisition failed", error=str(e.status))
            await asyncio.sleep(self.s.retry_period)

    async def _renew(self) -> None:
        last = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.s.retry_period)
            try:
                ok = await self._try()
            except ApiException:
                ok = False
            now = asyncio.get_running_loop().time()
            if ok:
                last = now
            elif now - last > self.s.renew_deadline:
                raise LeadershipLostError(f"lease {self.s.namespace}/{self.s.name} not renewed")

    async def release(self) -> None:
        if not self.is_leader:
            return
        try:
            lease = await self.api.read_namespaced_lease(self.s.name, self.s.namespace)
            raw = self.api.api_client.sanitize_for_serialization(lease)
            if (raw.get("spec") or {}).get("holderIdentity") == self.s.identity:
                raw["spec"]["holderIdentity"] = ""
                await self.api.replace_namespaced_lease(self.s.name, self.s.namespace, raw)
        except ApiException as e:
            log.warning("lease release failed", error=str(e.status))
        self.is_leader = False

    async def lead(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait for the lease, then run `work` while renewing it; raise when it is lost."""
        await self._acquire()
        self.is_leader = True
        log.info("became leader", lease=f"{self.s.namespace}/{self.s.name}", id=self.s.identity)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._renew())
                tg.create_task(work())
        except* LeadershipLostError as eg:
            self.is_leader = False
            raise eg.exceptions[0] from None

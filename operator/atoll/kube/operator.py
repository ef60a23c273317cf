"""`atoll run`: the operator process. The watches (atoll's own for the busy and core kinds,
kopf's for the kinds a cluster may not serve) and the webhooks (atoll's own HTTPS server,
`kube/admission.py`) run on every replica; the leader
also runs the scheduling loop, the Job reconcilers and the queue status writer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import structlog
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from atoll import __version__
from atoll.api import v1beta1
from atoll.api.configuration import Configuration
from atoll.api.core import Pod
from atoll.api.labels import MANAGED_LABEL
from atoll.control import integrations, leaderworkerset, podgroups
from atoll.control import jobframework as jf
from atoll.control.jobs import JobController, JobSettings, PodsReadySettings
from atoll.control.metrics import Metrics, ReplicaRole
from atoll.control.queue_status import QueueStatusReporter
from atoll.control.scheduler import Scheduler
from atoll.control.ungater import Ungater
from atoll.control.workqueue import WorkQueue
from atoll.engine import model as m
from atoll.kube import admission, bootstrap, connection, handlers, retry, webhook
from atoll.kube.connection import SERVICE_ACCOUNT_TOKEN
from atoll.kube.kinds import CUSTOM_KINDS
from atoll.kube.leader import LeaderElector, LeaseSettings
from atoll.kube.ratelimit import TokenBucket
from atoll.kube.watch import Watches
from atoll.kube.writers import KubeWriter
from atoll.state import afs
from atoll.state.cache import Cache, requeue_period
from atoll.state.devicequota import class_resources

LWS_KIND = leaderworkerset.LeaderWorkerSet.KIND
CONVERSION_CHECK_INTERVAL = 15.0
"""Seconds between checks of the CRDs' v1beta1 conversion webhook (a GET of each converting
CRD; one is written only when it needs to be: `_keep_webhook`)."""
QUEUE_STATUS_BATCH = 1.0
"""Seconds the queue statuses wait after a change before they are written, so that the
changes of that second go in one write per queue (Kueue's `UpdatesBatchPeriod`)."""

log = structlog.get_logger("atoll.operator")
__all__ = ["SERVICE_ACCOUNT_TOKEN", "Operator", "RunOptions", "configure_logging", "run"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    configuration: Configuration = field(default_factory=Configuration)
    kubeconfig: Path | None = None
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    webhook: str = "url"
    """`url` (the API server calls https://HOST:PORT, e.g. the sandbox), `service` (in a
    cluster, through the Service `webhook_service`), or `off`."""
    webhook_host: str = "127.0.0.1"
    webhook_addr: str = "127.0.0.1"
    webhook_port: int = 9443
    webhook_service: str = "atoll-system/atoll-webhook"
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 8080
    health_addr: str = "127.0.0.1"
    health_port: int = 8081
    leader_elect: bool = True
    workers: int = 4


def job_settings(cfg: Configuration, framework: str = integrations.BATCH_JOB) -> JobSettings:
    wfpr = cfg.wait_for_pods_ready
    strategy = wfpr.requeuing_strategy
    return JobSettings(
        enabled=framework in cfg.integrations.frameworks,
        manage_jobs_without_queue_name=cfg.manage_jobs_without_queue_name,
        managed_namespaces=cfg.managed_jobs_namespace_selector,
        pods_ready=PodsReadySettings(
            enable=cfg.wait_for_pods_ready_enabled,
            timeout=wfpr.timeout,
            recovery_timeout=wfpr.recovery_timeout,
            backoff_base=float(strategy.backoff_base_seconds),
            backoff_max=float(strategy.backoff_max_seconds),
            backoff_limit_count=strategy.backoff_limit_count,
        ),
    )


def new_cache(cfg: Configuration) -> Cache:
    """An empty cache set up as the Configuration says (DRA device classes → quota)."""
    return Cache(
        device_classes=class_resources(cfg.resources.device_class_mappings),
        requeue_period=requeue_period(
            batched=cfg.atoll.batched_requeue, long_interval=cfg.long_requeue_interval
        ),
        priority_class_defaulting=cfg.priority_class_defaulting,
        afs=afs.tracker_for(cfg),
    )


def fair_sharing(cfg: Configuration) -> m.FairSharing | None:
    if cfg.fair_sharing is None:
        return None
    return m.FairSharing(
        preemption_strategies=tuple(
            m.FairSharingStrategy(s.value) for s in cfg.fair_sharing.preemption_strategies
        )
    )


class Operator:
    """Everything one replica runs, wired together."""

    def __init__(self, opts: RunOptions, api: client.ApiClient) -> None:
        self.opts = opts
        self.api = api
        cfg = opts.configuration
        self.registry = CollectorRegistry()
        self.metrics = Metrics(
            self.registry,
            role=ReplicaRole.FOLLOWER if opts.leader_elect else ReplicaRole.STANDALONE,
            cluster_queue_resources=True,
            version=__version__,
        )
        conn = cfg.client_connection
        self.writer = KubeWriter(
            api,
            TokenBucket(conn.qps, max(1, conn.burst)),
            on_request=self.metrics.api_request,
        )
        self.cache = new_cache(cfg)
        self._queues_dirty = asyncio.Event()
        self.scheduler = Scheduler(
            cache=self.cache,
            store=self.writer,
            emit=self.writer.emit,
            fair_sharing=fair_sharing(cfg),
            metrics=self.metrics,
            defer_pending=self.writer.wait_spare,
            samples_taken=self._queues_dirty.set,
        )
        enabled = integrations.enabled(cfg.integrations.frameworks, self.writer, cache=self.cache)
        self.jobs = JobController(
            self.cache,
            self.writer,
            self.writer,
            self.writer.emit,
            settings=job_settings(cfg),
            metrics=self.metrics,
            # the enabled kinds that own Jobs (JobSet, MPIJob) keep theirs: neither the
            # webhook nor the reconciler takes them for the Job integration's
            integration=next((k for k in enabled if k.framework == integrations.BATCH_JOB), None),
        )
        self.job_queue = WorkQueue("jobs")
        if cfg.unsupported_frameworks:
            log.warning(
                "integrations not run by atoll, ignored", frameworks=cfg.unsupported_frameworks
            )
        self.kinds: dict[str, tuple[JobController, WorkQueue]] = {}
        """The other managed kinds (JobSet, …) enabled by `integrations.frameworks`: their
        reconciler and queue, by kind. Watched only once their CRD is found (`_start`)."""
        for kind in enabled:
            if kind.framework == integrations.BATCH_JOB:
                continue
            ctl = JobController(
                self.cache,
                self.writer,
                None,
                self.writer.emit,
                settings=job_settings(cfg, kind.framework),
                metrics=self.metrics,
                integration=kind,
            )
            self.kinds[kind.kind] = (ctl, WorkQueue(kind.kind.lower()))
        self.pod_queue = WorkQueue("pods")
        self.ungater = Ungater(
            self.cache, self.writer, self.writer, self.writer.emit, metrics=self.metrics
        )
        self.queues = QueueStatusReporter(
            self.cache,
            self.writer,
            time.time,
            self.metrics,
            fair_sharing=cfg.fair_sharing is not None,
        )
        self.synced = asyncio.Event()
        self.webhook_checked = asyncio.Event()
        self.leading = False
        self._conversion: dict[str, Any] | None = None
        """The clientConfig the CRDs' conversion webhook must have (this replica's URL, or the
        Service and its CA), once `_prepare_webhook` knows it; None with `--webhook off`."""
        self._service_server: admission.AdmissionServer | None = None
        """The webhook server in `service` mode, once `_prepare_webhook` made it."""
        self._webhook_task: asyncio.Task[None] | None = None
        """`_serve_webhooks`, started by `_prepare_webhook`."""
        self._webhook_started = asyncio.Event()
        self.listing_converts = False
        """The initial listing failed on the CRDs' conversion webhook: objects stored as v1beta1
        (a cluster that ran Kueue v0.15 or older) that only a replica can convert."""
        self._url_server = (
            webhook.make_url_server(
                addr=opts.webhook_addr, port=opts.webhook_port, host=opts.webhook_host
            )
            if opts.webhook == "url"
            else None
        )
        self._kopf = self._kopf_registry()
        self.webhooks = self._webhooks()
        """The mutating webhooks this replica serves (none with `--webhook off`)."""
        self.watches = Watches()
        handlers.register_watches(self.watches, self._wiring)
        self._webhook_urls: list[str] | None = None
        """url mode: the URLs the webhook configuration calls, as last watched (None before
        the first listing; empty when it is missing)."""
        self._webhook_urls_changed = asyncio.Event()
        self._webhook_events = 0
        if self._url_server is not None:
            self.watches.on(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                self._saw_webhook_configuration,
                known=lambda: [self.opts.configuration.atoll.webhook_configuration_name],
                field_selector="metadata.name="
                + self.opts.configuration.atoll.webhook_configuration_name,
            )
        self.elector = self._elector() if opts.leader_elect else None

    def _elector(self) -> LeaderElector:
        cfg = self.opts.configuration.leader_election
        return LeaderElector(
            self.api,
            LeaseSettings(
                namespace=cfg.resource_namespace or self.opts.configuration.namespace,
                name=cfg.resource_name,
                identity=self.opts.identity,
                lease_duration=cfg.lease_duration,
                renew_deadline=cfg.renew_deadline,
                retry_period=cfg.retry_period,
            ),
        )

    def not_ready(self) -> str | None:
        """Why `/readyz` is not ok (None: ready): the initial listing is not done, the webhook
        is not served yet (its configuration unchecked in `url` mode, its server not
        listening in `service` mode), or (with leader election) this replica neither leads
        nor can read the Lease.

        One exception in `service` mode: while the initial listing waits on this replica's
        conversion webhook (`listing_converts`), the replica is ready once its server listens,
        whatever the Lease (which is tried only after the listing), so that the Service routes
        the API server's ConversionReviews to it when no other replica is ready (without that,
        the listing would wait for the conversions, and the Service for the listing); and
        after the listing until the Lease was tried once, so that the only ready replica does
        not leave the Service between the two. Admission reviews reaching it meanwhile wait
        for the listing."""
        served = self._service_server
        if self.listing_converts and self.opts.webhook == "service":
            elector = self.elector
            if not self.synced.is_set() or (elector is not None and not elector.tried):
                if served is None or not served.listening.is_set():
                    return "webhook server not listening yet"
                return None
        if not self.synced.is_set():
            return "initial sync not done"
        if self._url_server is not None and not self.webhook_checked.is_set():
            return "webhook configuration not checked yet"
        if self.opts.webhook == "service" and (served is None or not served.listening.is_set()):
            return "webhook server not listening yet"
        if self.elector is not None and not self.elector.healthy():
            return f"lease {self.elector.lease}: {self.elector.problem or 'not reachable'}"
        return None

    def _kopf_registry(self) -> kopf.OperatorRegistry:
        registry = kopf.OperatorRegistry()
        self._wiring = handlers.Wiring(
            cache=self.cache,
            wake=self.scheduler.wake,
            jobs=self.job_queue,
            queues_changed=self._queues_dirty.set,
            ungater=self.ungater,
            pods=self.pod_queue,
            seen_workload=self.writer.observe_workload,
            gone_workload=self.writer.forget_workload,
            owners={kind: queue for kind, (_, queue) in self.kinds.items()},
            group_pod=self._group_pod if {"Pod", LWS_KIND} & set(self.kinds) else None,
        )
        handlers.register(registry, self._wiring)

        @kopf.on.login(registry=registry)
        def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            if SERVICE_ACCOUNT_TOKEN.exists() and self.opts.kubeconfig is None:
                return kopf.login_with_service_account(**kwargs)
            return kopf.login_with_kubeconfig(**kwargs)

        return registry

    def _webhooks(self) -> list[admission.Webhook]:
        if self.opts.webhook == "off":
            return []
        default = jf.Defaults(self.cache.has_default_queue, self.cache.has_default_priority_class)
        hooks = [webhook.job_webhook(self.jobs.manages, default)]
        for kind, (ctl, _) in self.kinds.items():
            if kind in CUSTOM_KINDS:
                hooks.append(webhook.kind_webhook(ctl.manages, CUSTOM_KINDS[kind], default))
        if {"Pod", LWS_KIND} & set(self.kinds):
            plain = self.kinds["Pod"][0].manages if "Pod" in self.kinds else lambda _: False
            parents = frozenset({leaderworkerset.FRAMEWORK} if LWS_KIND in self.kinds else ())
            hooks.append(webhook.pod_webhook(plain, parents=parents, defaults=default))
        return hooks

    async def _serve_webhooks(self) -> None:
        """Serve the webhooks (url or service mode) until cancelled. Started by
        `_prepare_webhook`, before the initial listing: conversions are answered at once (the
        listing of queues stored as v1beta1 needs them), admission reviews once the listing
        is done, as their handlers read the cache (a namespace's default LocalQueue)."""
        if self._url_server is not None:
            server = self._url_server.server
        elif self._service_server is not None:
            server = self._service_server
        else:
            await asyncio.Event().wait()  # like every task of `run`, it never ends by itself
            return
        await server.serve([*self.webhooks, *webhook.passthrough(self.webhooks)], self.synced)

    def _kopf_settings(self) -> kopf.OperatorSettings:
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        # kopf's requests and watches retry API errors with our policy, endlessly: a watch
        # must outlive any outage of the API server.
        settings.networking.error_backoffs = retry.DEFAULT
        settings.networking.enforce_retry_after = True
        settings.watching.client_timeout = 330
        # kopf waits this long for more events of one object before handling the latest;
        # its 0.1 s default would add to every admission's latency.
        settings.batching.batch_window = 0.005
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="atoll.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="atoll.dev", key="last-handled-configuration"
        )
        settings.persistence.finalizer = "atoll.dev/kopf-finalizer"
        return settings

    async def _queue_status_loop(self) -> None:
        while True:
            await self._queues_dirty.wait()
            await asyncio.sleep(QUEUE_STATUS_BATCH)
            self._queues_dirty.clear()
            try:
                await self.queues.report()
            except Exception as e:
                log.warning("queue status write failed", error=str(e)[:600])
                self._queues_dirty.set()
                await asyncio.sleep(2)

    def _saw_webhook_configuration(self, kind: str | None, body: Mapping[str, Any]) -> None:
        hooks = [] if kind == "DELETED" else body.get("webhooks") or ()
        self._webhook_urls = [
            url for h in hooks if (url := (h.get("clientConfig") or {}).get("url"))
        ]
        self._webhook_events += 1
        self._webhook_urls_changed.set()

    async def _keep_webhook(self) -> None:
        """`url` mode, on every replica: keep the configuration pointing at a replica whose
        server listens. Once this replica's server listens, it takes the configuration over
        when it is missing or names a URL where nothing listens (a replica that stopped).
        The configuration is watched (one object, by name), so it costs no API request in a
        steady state: a change is handled at once, and a URL of another replica is checked for
        a listener every second. This replica's own server is checked at its URL once, when it
        starts listening (it runs in this process: if it stops, the operator stops), not
        every second. `/readyz` waits for the first check. The CRDs' v1beta1 conversion
        webhook is not watched: it is read every `CONVERSION_CHECK_INTERVAL` (a GET of each
        converting CRD) and taken over when it names a URL where nothing listens.

        `service` mode: every `CONVERSION_CHECK_INTERVAL` the CRDs' conversion webhook is
        set back to the Service and CA if something changed it (a `kubectl replace` of
        crds/, a sandbox-style run against the cluster)."""
        server, conversion = self._url_server, self._conversion
        if conversion is None:  # --webhook off
            await asyncio.Event().wait()  # like every task of `run`, it never ends by itself
            return
        if server is None:
            while True:
                await asyncio.sleep(CONVERSION_CHECK_INTERVAL)
                await webhook.point_conversion(
                    self.api, conversion, take_from_live=True, attempts=1
                )
        name = self.opts.configuration.atoll.webhook_configuration_name
        hooks = webhook.url_webhooks(
            self.webhooks,
            configuration=name,
            url=server.url,
            ca=server.ca,
            skip_namespaces=("kube-system", self.opts.configuration.namespace),
        )
        mine = {h["clientConfig"]["url"] for h in hooks}
        checked_conversion = time.monotonic()
        await server.server.listening.wait()
        while True:  # reachable at its URL's host too
            if await webhook.listening(server.url):
                break
            await asyncio.sleep(0.1)
        while True:
            current = self._webhook_urls
            if current is not None:
                try:
                    alive = [u for u in current if u in mine or await webhook.listening(u)]
                    if not current or len(alive) < len(current):
                        seen = self._webhook_events
                        await webhook.own_url_configuration(self.api, name, hooks)
                        log.info("webhook configuration points here", name=name, url=server.url)
                        checked_conversion = -math.inf  # the conversion webhook too, below
                        if self._webhook_events == seen:
                            self._webhook_urls = None  # until the watch shows the write
                    else:
                        self.webhook_checked.set()
                    if time.monotonic() - checked_conversion >= CONVERSION_CHECK_INTERVAL:
                        # The CRDs' conversion webhook may be another replica's, which the
                        # mutating configuration's URLs do not show: taken when it stopped
                        # (checked at once after taking the mutating configuration over).
                        checked_conversion = time.monotonic()
                        await webhook.point_conversion(
                            self.api,
                            conversion,
                            take_from_live=False,
                            take_from_service=False,
                            attempts=1,
                        )
                except Exception as e:
                    log.warning("webhook configuration not checked", name=name, error=str(e)[:300])
            self._webhook_urls_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._webhook_urls_changed.wait()

    async def _lead(self) -> None:
        self.leading = True
        if self.opts.leader_elect:
            self.metrics.set_role(ReplicaRole.LEADER)
        for key in list(self.cache.jobs):
            self.job_queue.add(key)
        for ctl, queue in self.kinds.values():
            for key in ctl.kind.keys(self.cache):
                queue.add(key)
        for key in list(self.ungater.gated):
            self.pod_queue.add(key)
        self._queues_dirty.set()
        try:
            await self.scheduler.evict_untrusted()
            self.scheduler.wake()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.scheduler.run())
                tg.create_task(self._queue_status_loop())
                for _ in range(self.opts.workers):
                    tg.create_task(self.job_queue.work(self.jobs.reconcile))
                for ctl, queue in self.kinds.values():
                    for _ in range(self.opts.workers):
                        tg.create_task(queue.work(ctl.reconcile))
                tg.create_task(self.pod_queue.work(self.ungater.reconcile))
                tg.create_task(self.writer.send_events())
                tg.create_task(self.scheduler.write_pending())
        finally:
            # Leadership lost (or shutdown): admissions assumed but not written are dropped,
            # so that a later term starts from the Workload statuses alone.
            self.leading = False
            if self.opts.leader_elect:
                self.metrics.set_role(ReplicaRole.FOLLOWER)
            for key in list(self.cache.assumed):
                self.cache.forget(key)

    async def _http(self) -> None:
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(
                body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            why = self.not_ready()
            return web.Response(text="ok") if why is None else web.Response(status=503, text=why)

        apps = []
        m_app = web.Application()
        m_app.router.add_get("/metrics", metrics)
        h_app = web.Application()
        h_app.router.add_get("/healthz", healthz)
        h_app.router.add_get("/readyz", readyz)
        for app, addr, port in (
            (m_app, self.opts.metrics_addr, self.opts.metrics_port),
            (h_app, self.opts.health_addr, self.opts.health_port),
        ):
            if port <= 0:
                continue
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, addr, port).start()
            apps.append(runner)
        try:
            await asyncio.Event().wait()
        finally:
            for runner in apps:
                await runner.cleanup()

    async def _prepare_webhook(self) -> None:
        """Before the listing: the webhook's certificate and the caBundle of its configuration
        (service mode), the webhook server started (`_serve_webhooks`), and the CRDs'
        conversion webhook pointed at it (`webhook.point_conversion`). Both come before
        anything is listed: the API server converts queues stored as v1beta1 (a cluster that
        ran Kueue v0.15 or older) through the webhook for every v1beta2 read, this replica's
        listing included, and a CRD update closes the watches of its resource."""
        o = self.opts
        if self._url_server is not None:
            server = self._url_server.server
            self._conversion = webhook.conversion_url(self._url_server.url, self._url_server.ca)
        elif o.webhook == "service":
            cfg = o.configuration
            ns, _, service = o.webhook_service.partition("/")
            cert = await webhook.shared_certificate(
                self.api,
                namespace=ns,
                secret=cfg.internal_cert_management.webhook_secret_name,
                service=service,
            )
            await webhook.patch_ca_bundle(self.api, cfg.atoll.webhook_configuration_name, cert.ca)
            server = self._service_server = webhook.make_service_server(
                addr=o.webhook_addr, port=o.webhook_port, cert=cert
            )
            self._conversion = webhook.conversion_service(o.webhook_service, cert.ca)
        self._webhook_task = asyncio.create_task(self._serve_webhooks(), name="webhook")
        self._webhook_started.set()
        if self._conversion is None:
            return
        listening = asyncio.create_task(server.listening.wait())
        try:
            await asyncio.wait([self._webhook_task, listening], return_when=asyncio.FIRST_COMPLETED)
        finally:
            listening.cancel()
        if self._webhook_task.done():
            self._webhook_task.result()  # it could not listen: raise why
        await webhook.point_conversion(
            self.api, self._conversion, take_from_live=self._url_server is None
        )

    def _listing_retried(self, attempt: int, error: BaseException) -> None:
        """The initial listing failed and is tried again: logged as `retry.call` logs it, and
        noted when this replica's conversion webhook failed it."""
        if not self.listing_converts and needs_conversion(error, self.opts.webhook_service):
            self.listing_converts = True
            log.warning(
                "the initial listing waits on the v1beta1 conversion webhook (objects stored as "
                "v1beta1 by Kueue v0.15 or older)"
                + (
                    ": ready early, so that the webhook Service reaches this replica"
                    if self.opts.webhook == "service"
                    else ""
                ),
            )
        retry.log_retry("initial listing", attempt, error)

    def _group_pod(self, pod: Pod, deleted: bool) -> None:
        """A pod of the plain-pod integration (labelled managed by the webhook) or of a
        managed LeaderWorkerSet changed: keep its group in the cache and reconcile the group."""
        lws_group = leaderworkerset.pod_group_key(pod) if LWS_KIND in self.kinds else None
        if lws_group is not None:
            if deleted:
                self.cache.delete_group_pod(lws_group, pod.name, table=self.cache.lws_pods)
            else:
                self.cache.set_group_pod(lws_group, pod, table=self.cache.lws_pods)
            self.kinds[LWS_KIND][1].add(lws_group)
            return
        if (pod.metadata.labels or {}).get(MANAGED_LABEL) != "true" or "Pod" not in self.kinds:
            return
        key = podgroups.group_key(pod)
        if deleted:
            self.cache.delete_group_pod(key, pod.name)
        else:
            self.cache.set_group_pod(key, pod)
        self.kinds["Pod"][1].add(key)

    async def _watch_kinds(self) -> None:
        """Watch each enabled kind whose CRD the cluster serves; an integration whose CRD is
        missing is skipped with a log line (restart atoll once it is installed). Pods are
        watched anyway."""
        for name, (_, queue) in self.kinds.items():
            kind = CUSTOM_KINDS.get(name)
            if kind is None:
                continue
            if not await bootstrap.serves(self.api, self.cache, kind):
                log.warning(
                    "integration skipped: its CRD is not installed",
                    framework=kind.framework,
                    crd=kind.crd,
                )
                continue
            handlers.register_kind(self.watches, self._wiring, queue, kind)
            log.info("integration enabled", framework=kind.framework)

    async def _start(self) -> None:
        """Wait for the API server, set up the webhook's certificate, list everything."""
        await connection.wait_for_server(self.api)
        await self._prepare_webhook()
        versions: dict[tuple[str, str, str], str] = {}
        counts = await bootstrap.load(
            self.api,
            self.cache,
            versions=versions,
            parsers=self._wiring.parsers,
            on_retry=self._listing_retried,
        )
        for (group, version, plural), listed_at in versions.items():
            self.watches.start_at(group, version, plural, listed_at)
        await self._watch_kinds()
        # The Workload and Job watches resume after the listing, so they replay none of them:
        # as a watch event would, the writer takes every listed Workload as the base of its
        # next status write (else its first write of each would GET it and hold a second
        # parse of it: 10,000 GETs and 23 MiB after a restart with 10,000 pending), and every
        # listed Workload's owner is queued once (an owner that is gone finishes its
        # Workload as OwnerNotFound and releases its quota); every listed Job is queued when
        # this replica leads (`_lead`).
        for wl in list(self.cache.workloads.values()):
            self._wiring.seen_workload(wl)
            handlers.queue_owner(wl, self._wiring)
        log.info("initial sync done", **counts)
        self.synced.set()

    async def _webhook_served(self) -> None:
        """Returns when the webhook server started by `_start` has stopped (it raised)."""
        await self._webhook_started.wait()
        assert self._webhook_task is not None
        await asyncio.wait([self._webhook_task])

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Until `stop` is set: serve /healthz at once (/readyz once ready), start (the
        webhook server first, then the listing), then run the watches and (when leading)
        the scheduling loop beside the webhook."""
        asyncio.get_running_loop().set_exception_handler(exception_handler)
        stop = stop or asyncio.Event()
        http = asyncio.create_task(self._http())
        start = asyncio.create_task(self._start())
        stopper = asyncio.create_task(stop.wait())
        served = asyncio.create_task(self._webhook_served())
        await asyncio.wait([start, stopper, http, served], return_when=asyncio.FIRST_COMPLETED)
        served.cancel()
        if not start.done() or start.exception() is not None:
            hooks = [] if self._webhook_task is None else [self._webhook_task]
            for t in (start, stopper, http, *hooks):
                t.cancel()
            await asyncio.gather(start, stopper, http, *hooks, return_exceptions=True)
            for failed in (*hooks, http):  # the webhook server or /healthz could not serve
                if failed.done() and not failed.cancelled() and failed.exception() is not None:
                    raise failed.exception()  # type: ignore[misc]
            if not start.cancelled() and start.done() and start.exception() is not None:
                raise start.exception()  # type: ignore[misc]
            log.info("operator stopped")
            return
        work: list[Coroutine[Any, Any, None]] = [
            kopf.operator(
                registry=self._kopf,
                settings=self._kopf_settings(),
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
            ),
            self.watches.run(self.api),
            self._keep_webhook(),
        ]
        elector = self.elector
        if elector is not None:
            work.append(elector.lead(self._lead))
        else:
            work.append(self._lead())
        assert self._webhook_task is not None  # started by `_start`
        tasks = [http, self._webhook_task, *(asyncio.create_task(c) for c in work)]
        everything: list[asyncio.Task[Any]] = [*tasks, stopper]
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.set()
            for task in everything:
                task.cancel()
            await asyncio.gather(*everything, return_exceptions=True)
            if elector is not None:
                await elector.release()
        for finished in done:
            if finished is not stopper and not finished.cancelled():
                error = finished.exception()
                if error is not None:
                    raise error
        log.info("operator stopped")


def needs_conversion(error: BaseException, service: str) -> bool:
    """The API server could not reach the conversion webhook at the Service `service`
    (NS/NAME) for a kind atoll converts: it answers 500 with `conversion webhook for
    kueue.x-k8s.io/v1beta1, Kind=ClusterQueue failed: Post "https://NAME.NS.svc:443/convert…`.
    Not when the webhook answered (a conversion it refused), nor another Service (say, the
    one of Kueue's CRDs left in place), which routing to this replica cannot help."""
    if retry.status_of(error) != 500:
        return False
    body = getattr(error, "body", None)
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or error)
    ns, _, name = service.partition("/")
    kinds = (f"Kind={kind} failed" for kind in v1beta1.CONVERTED_KINDS)
    return (
        "conversion webhook for" in text
        and any(k in text for k in kinds)
        and f"https://{name}.{ns}.svc" in text
    )


_ASYNCGEN_CLOSE = "an error occurred during closing of asynchronous generator"


def exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler of errors no task awaits: asyncio's, except for one of kopf's watch
    streams that fails to close when the loop shuts down after a stop (a watch left waiting
    at an event when its task was cancelled; kopf's stream context then raises "generator
    didn't stop"). That is a line at exit, not a crash: a warning without a traceback."""
    gen = context.get("asyncgen")
    code = getattr(gen, "ag_code", None)
    if (
        str(context.get("message", "")).startswith(_ASYNCGEN_CLOSE)
        and code is not None
        and f"{os.sep}kopf{os.sep}" in code.co_filename
    ):
        log.warning(
            "a kopf watch stream did not close cleanly at shutdown",
            stream=code.co_name,
            error=repr(context.get("exception")),
        )
        return
    loop.default_exception_handler(context)


def configure_logging(fmt: str, level: str) -> None:
    lvl = getattr(logging, level.upper(), logging.INFO)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json" or (fmt == "auto" and not os.isatty(2))
        else structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=__import__("sys").stderr),
    )
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kopf").setLevel(logging.WARNING)


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NETRC")


def no_env_session(api: client.ApiClient) -> None:
    """Stop the client's aiohttp session from looking for a `.netrc` on every request (a
    thread-pool hop per API call: ~12 % of the operator's CPU under load) when no proxy or
    netrc is configured in the environment — kubeconfig credentials are used either way."""
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


async def run(opts: RunOptions) -> None:
    """Run one replica until SIGTERM or SIGINT (raises `connection.KubeconfigError` when
    there are no usable credentials, `connection.RefusedError` when the API server refuses
    what atoll needs, e.g. a missing CRD)."""
    in_cluster = await asyncio.to_thread(SERVICE_ACCOUNT_TOKEN.exists)
    if opts.kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(opts.kubeconfig)
    await connection.load(opts.kubeconfig, in_cluster=in_cluster)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with client.ApiClient() as api:
        no_env_session(api)
        try:
            await Operator(opts, api).run(stop)
        except ApiException as e:
            raise connection.refused(e) from e

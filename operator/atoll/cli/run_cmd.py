"""`atoll run`: start the operator against the current cluster (KUBECONFIG or in-cluster)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atoll.api.configuration import (
    Configuration,
    ConfigurationError,
    EventLoop,
    apply_overrides,
    load_configuration,
    overrides_from_env,
    parse_bind_address,
    parse_override,
)
from atoll.cli.errors import FAILED, complain
from atoll.kube import connection
from atoll.kube.connection import SERVICE_ACCOUNT_TOKEN as IN_CLUSTER_TOKEN
from atoll.kube.connection import KubeconfigError, check_kubeconfig
from atoll.kube.operator import RunOptions, configure_logging, log, run


def _address(flag: str | None, configured: str, what: str) -> tuple[str, int]:
    parsed = parse_bind_address(flag if flag is not None else configured)
    if parsed is None:
        return "127.0.0.1", 0
    host, port = parsed
    if flag is None and not host:
        host = "0.0.0.0"
    return host or "127.0.0.1", port


def configuration(args: argparse.Namespace) -> Configuration:
    """The Configuration from `--config`, then ATOLL_CONFIG__… variables, then `--set`
    (raises ConfigurationError naming the field)."""
    cfg = load_configuration(Path(args.config) if args.config else None)
    overrides = overrides_from_env(os.environ)
    overrides.update(dict(parse_override(s) for s in args.set or ()))
    return apply_overrides(cfg, overrides) if overrides else cfg


def add_configuration_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="Kueue-format Configuration file (config.kueue.x-k8s.io/v1beta2, or v1beta1 "
        "read as Kueue reads it)",
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="override a configuration field, e.g. --set waitForPodsReady.timeout=5m "
        "(repeatable; also ATOLL_CONFIG__path__to__field=value in the environment)",
    )


def webhook_mode(args: argparse.Namespace, token: Path = IN_CLUSTER_TOKEN) -> str:
    """`--webhook auto` (the default): `service` inside a cluster (a service-account token
    and no --kubeconfig), else `url`."""
    if args.webhook != "auto":
        return str(args.webhook)
    return "service" if token.exists() and not args.kubeconfig else "url"


def webhook_service(args: argparse.Namespace, cfg: Configuration) -> str:
    """`--webhook-service`, else the configuration's namespace and webhookServiceName."""
    return str(
        args.webhook_service
        or f"{cfg.namespace}/{cfg.internal_cert_management.webhook_service_name}"
    )


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when chosen and installed, else None (asyncio's own). The operator is
    one process on one core, mostly running the event loop: uvloop's loop, transports and
    TLS are compiled (libuv), which costs less CPU per request and per watch event."""
    if choice is EventLoop.UVLOOP:
        try:
            import uvloop  # noqa: PLC0415 (only `atoll run` needs it)
        except ImportError:
            return None
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return None


def log_ignored(cfg: Configuration) -> None:
    """Name, once at start, the fields of the configuration file atoll does not use (Kueue's
    fields it has no part for, and what Kueue's own v1beta2 dropped), so none is taken for
    applied."""
    if cfg.ignored_fields:
        log.warning(
            "configuration fields atoll does not use, ignored", fields=list(cfg.ignored_fields)
        )


def _run(args: argparse.Namespace) -> int:
    try:
        cfg = configuration(args)
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
        check_kubeconfig(kubeconfig, in_cluster=IN_CLUSTER_TOKEN.exists())
    except (ConfigurationError, KubeconfigError) as e:
        return complain("run", e)
    configure_logging(cfg.atoll.log_format.value, cfg.atoll.log_level)
    log_ignored(cfg)
    metrics = _address(args.metrics_bind_address, cfg.metrics.bind_address, "metrics")
    health = _address(args.health_bind_address, cfg.health.health_probe_bind_address, "health")
    webhook_addr, _, webhook_port = (args.webhook_bind_address or "").rpartition(":")
    mode = webhook_mode(args)
    service = webhook_service(args, cfg)
    opts = RunOptions(
        configuration=cfg,
        kubeconfig=kubeconfig,
        webhook=mode,
        webhook_host=args.webhook_host,
        webhook_addr=webhook_addr or ("127.0.0.1" if mode == "url" else "0.0.0.0"),
        webhook_port=int(webhook_port or cfg.webhook.port),
        webhook_service=service,
        metrics_addr=metrics[0],
        metrics_port=metrics[1],
        health_addr=health[0],
        health_port=health[1],
        leader_elect=cfg.leader_election.leader_elect and not args.no_leader_elect,
        **({"identity": args.identity} if args.identity else {}),
    )
    try:
        with asyncio.Runner(loop_factory=loop_factory(cfg.atoll.event_loop)) as runner:
            runner.run(run(opts))
    except KeyboardInterrupt:
        return 130
    except connection.KubeconfigError as e:
        return complain("run", e)
    except connection.RefusedError as e:
        return complain("run", e, FAILED)
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the operator (admits labelled Jobs against Kueue queues)",
        description=(
            "Run atoll's operator against the cluster of KUBECONFIG (or in-cluster). It watches "
            "Kueue's queue objects and labelled batch/v1 Jobs, creates their Workloads and "
            "admits whole gangs. It waits for an unreachable API server and retries transient "
            "API errors; a missing or unreadable kubeconfig exits with status 2."
        ),
    )
    add_configuration_options(parser)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    parser.add_argument(
        "--webhook",
        choices=("auto", "url", "service", "off"),
        default="auto",
        help="how the API server reaches the Job webhook: url (https://HOST:PORT, e.g. the "
        "sandbox), service (in a cluster), off, or auto: service when running in a cluster "
        "(service-account token, no --kubeconfig), else url (default auto)",
    )
    parser.add_argument("--webhook-host", default="127.0.0.1", help="host in the webhook URL")
    parser.add_argument("--webhook-bind-address", help="HOST:PORT to serve the webhook on")
    parser.add_argument(
        "--webhook-service",
        help="NAMESPACE/NAME of the webhook Service (with --webhook service; default: the "
        "configuration's namespace/internalCertManagement.webhookServiceName)",
    )
    parser.add_argument("--metrics-bind-address", help="HOST:PORT for /metrics ('0' disables)")
    parser.add_argument("--health-bind-address", help="HOST:PORT for /healthz and /readyz")
    parser.add_argument("--no-leader-elect", action="store_true", help="admit without a Lease")
    parser.add_argument("--identity", help="leader-election identity (default host-pid)")
    parser.set_defaults(func=_run)

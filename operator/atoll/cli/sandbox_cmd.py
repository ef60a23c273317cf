"""`atoll sandbox build|up|crds|down|status|env`: the docker-free local control plane."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from atoll.sandbox import binaries, integrations
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.crds import apply_crds
from atoll.sandbox.processes import StartError, rss_mib
from atoll.sandbox.shapes import ShapeError, load_shape


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _sandbox(args: argparse.Namespace) -> Sandbox:
    return Sandbox(root=Path(args.dir) if args.dir else None)


def _build(args: argparse.Namespace) -> int:
    try:
        timings = binaries.build(log=_err)
        for integration in integrations.parse(args.with_):
            seconds = integrations.build(integration, log=_err)
            if seconds is not None:
                timings[integration.process] = seconds
    except (binaries.BuildError, ValueError) as e:
        _err(f"atoll sandbox build: {e}")
        return 1
    for what, seconds in timings.items():
        _err(f"built {what} in {seconds:.0f}s")
    print(binaries.bin_dir())
    return 0


def _up(args: argparse.Namespace) -> int:
    try:
        shape = load_shape(Path(args.shape)) if args.shape else None
        sandbox = _sandbox(args)
        wanted = integrations.parse(args.with_)
        sandbox.up(shape, log=_err)
        for integration in wanted:
            integrations.start(sandbox, integration, log=_err)
    except (ShapeError, StartError, binaries.BuildError, ValueError) as e:
        _err(f"atoll sandbox up: {e}")
        return 1
    print(_env_lines(sandbox))
    return 0


def _crds(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args)
    if sandbox.load_state() is None:
        _err("atoll sandbox crds: the sandbox is not up (atoll sandbox up)")
        return 1
    try:
        names = apply_crds(sandbox.kubectl, Path(args.folder))
    except FileNotFoundError as e:
        _err(f"atoll sandbox crds: {e}")
        return 1
    except subprocess.CalledProcessError as e:
        _err(f"atoll sandbox crds: kubectl failed: {(e.stderr or '').strip() or e}")
        return 1
    except subprocess.TimeoutExpired as e:
        _err(f"atoll sandbox crds: kubectl did not finish in {e.timeout:.0f}s")
        return 1
    _err(f"applied {len(names)} CRDs from {args.folder}")
    return 0


def _down(args: argparse.Namespace) -> int:
    _sandbox(args).down(log=_err)
    return 0


def _status(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args)
    components = sandbox.status()
    if not components:
        print(f"sandbox not running (state folder {sandbox.root})")
        return 3
    for c in components:
        state_word = "running" if c.running else "STOPPED"
        rss = f"{rss_mib(c.pid):6.0f} MiB" if c.running else "     - MiB"
        print(f"{c.name:<25} pid {c.pid:<8} {state_word}  rss {rss}  log {c.log}")
    state = sandbox.load_state()
    if state is not None:
        print(f"api server: https://127.0.0.1:{state.apiserver_port}  shapes: {state.shapes}")
        print(f"kubeconfig: {sandbox.kubeconfig}")
    return 0 if sandbox.is_running() else 1


def _env_lines(sandbox: Sandbox) -> str:
    return (
        f"export KUBECONFIG={shlex.quote(str(sandbox.kubeconfig))}\n"
        f"export PATH={shlex.quote(str(sandbox.bin_dir))}:$PATH  # kubectl: {sandbox.kubectl_path}"
    )


def _env(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args)
    if not sandbox.is_running():
        _err("sandbox not running: start it with `atoll sandbox up`")
        return 1
    print(_env_lines(sandbox))
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "sandbox",
        help="docker-free local Kubernetes control plane with fake GPU nodes",
        description=(
            "A real control plane on loopback (etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler, KWOK), built from Go modules, with fake GPU nodes from a shape file."
        ),
    )
    parser.add_argument(
        "--dir", help="state folder (default: $ATOLL_SANDBOX_DIR or ~/.cache/atoll/run/default)"
    )

    def _usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_usage)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    with_help = (
        "integration controllers, comma-separated, built from their Go modules "
        f"({', '.join(integrations.INTEGRATIONS)})"
    )
    build = verbs.add_parser(
        "build", help="build the binaries from Go modules if missing (first time ~10 min)"
    )
    build.add_argument("--with", dest="with_", metavar="NAMES", help=with_help)
    build.set_defaults(func=_build)
    up = verbs.add_parser("up", help="start the control plane (harmless when already up)")
    up.add_argument("--shape", help="cluster shape file, e.g. examples/clusters/dgx-h100.yaml")
    up.add_argument(
        "--with", dest="with_", metavar="NAMES", help=with_help + ": CRDs, controller, webhooks"
    )
    up.set_defaults(func=_up)
    crds = verbs.add_parser(
        "crds",
        help="apply atoll's CRDs (again): like `kubectl apply --server-side -f crds/`, but "
        "keeping the URL a sandbox operator gave the v1beta1 conversion webhook",
    )
    crds.add_argument("folder", nargs="?", default="crds", help="folder of CRDs (default crds)")
    crds.set_defaults(func=_crds)
    verbs.add_parser("down", help="stop every sandbox process by pid, remove state").set_defaults(
        func=_down
    )
    verbs.add_parser("status", help="say what runs").set_defaults(func=_status)
    verbs.add_parser("env", help="print `export KUBECONFIG=...` and the kubectl path").set_defaults(
        func=_env
    )

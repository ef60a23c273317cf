"""The sandbox's binaries: pinned versions, the cache they live in, and how they are built.

Kubernetes, etcd and KWOK are built from Go modules (wrapper modules under
`deploy/sandbox/{k8s,etcd,kwok}` whose go.mod/go.sum pin every version) into a cache directory
outside the repository, keyed by the versions, and rebuilt only when missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"

K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_BINARIES = ("etcd", *K8S_COMMANDS, "kwok")


class BuildError(RuntimeError):
    """A sandbox binary could not be built (no Go, module proxy unreachable, compile error)."""


def cache_root() -> Path:
    """`$ATOLL_CACHE_DIR`, else `$XDG_CACHE_HOME/atoll`, else `~/.cache/atoll`."""
    if env := os.environ.get("ATOLL_CACHE_DIR"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "atoll"


def bin_dir() -> Path:
    """Where the binaries are (`$ATOLL_SANDBOX_BIN` overrides the versioned cache folder)."""
    if env := os.environ.get("ATOLL_SANDBOX_BIN"):
        return Path(env)
    key = f"k8s-{K8S_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}"
    return cache_root() / "sandbox" / key / "bin"


def modules_dir() -> Path:
    """The Go wrapper modules (`$ATOLL_SANDBOX_MODULES`, else `deploy/sandbox` of this checkout)."""
    if env := os.environ.get("ATOLL_SANDBOX_MODULES"):
        return Path(env)
    return Path(__file__).resolve().parents[3] / "deploy" / "sandbox"


def missing(directory: Path | None = None) -> list[str]:
    """Names of the binaries not yet built."""
    directory = directory or bin_dir()
    return [b for b in ALL_BINARIES if not os.access(directory / b, os.X_OK)]


@dataclass(frozen=True, slots=True)
class _Step:
    what: str
    module: str
    packages: tuple[str, ...]
    tags: str
    ldflags: str
    single_output: str | None = None


def _k8s_ldflags() -> str:
    minor = K8S_VERSION.split(".")[1]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={K8S_VERSION}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={stamp}",
        ]
    return " ".join(flags)


def _steps(todo: list[str]) -> list[_Step]:
    steps = []
    k8s = [c for c in K8S_COMMANDS if c in todo]
    if k8s:
        steps.append(
            _Step(
                what=f"Kubernetes {K8S_VERSION} ({', '.join(k8s)})",
                module="k8s",
                packages=tuple(f"k8s.io/kubernetes/cmd/{c}" for c in k8s),
                tags="selinux,notest,grpcnotrace",
                ldflags=_k8s_ldflags(),
            )
        )
    if "etcd" in todo:
        steps.append(
            _Step(
                what=f"etcd {ETCD_VERSION}",
                module="etcd",
                packages=("go.etcd.io/etcd/server/v3",),
                tags="",
                ldflags=f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={ETCD_VERSION}",
                single_output="etcd",
            )
        )
    if "kwok" in todo:
        steps.append(
            _Step(
                what=f"KWOK {KWOK_VERSION}",
                module="kwok",
                packages=("sigs.k8s.io/kwok/cmd/kwok",),
                tags="",
                ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION}",
                single_output="kwok",
            )
        )
    return steps


def go_env() -> dict[str, str]:
    """The build environment of every wrapper module: no workspace, the local toolchain, static
    binaries, reproducible paths, go.mod/go.sum as committed."""
    env = dict(os.environ, GOWORK="off", GOTOOLCHAIN="local", CGO_ENABLED="0")
    env["GOFLAGS"] = "-trimpath -buildvcs=false -mod=readonly"
    return env


def go_build(
    what: str, module: str, packages: tuple[str, ...], out: str, *, ldflags: str, tags: str = ""
) -> float:
    """`nice -n 19 go build` of `packages` in the wrapper module `module`; return the seconds."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"Go (>= 1.26) is needed to build {what}: `go` not on PATH")
    cmd = ["nice", "-n", "19", go, "build", "-ldflags", ldflags, "-o", out]
    if tags:
        cmd += ["-tags", tags]
    cmd += list(packages)
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=modules_dir() / module, env=go_env(), check=False)
    if done.returncode != 0:
        raise BuildError(f"building {what} failed (exit {done.returncode}): {cmd}")
    return time.monotonic() - start


def module_source(module: str, path: str, version: str, *, cwd: Path | None = None) -> Path:
    """The unpacked source of `path@version` in the Go module cache (downloaded if missing),
    resolved through the wrapper module `module` that pins it (or the module in `cwd`)."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{path}@{version}"],
        cwd=cwd or modules_dir() / module,
        env=go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BuildError(f"go mod download {path}@{version} failed: {done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["Dir"])


def build(*, directory: Path | None = None, log: Callable[[str], None] = print) -> dict[str, float]:
    """Build every missing binary; return seconds spent per step (empty when all were there)."""
    directory = directory or bin_dir()
    todo = missing(directory)
    if not todo:
        return {}
    directory.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    for step in _steps(todo):
        log(f"building {step.what} into {directory} (first time: minutes; cached afterwards)")
        out = directory / step.single_output if step.single_output else f"{directory}/"
        timings[step.what] = go_build(
            step.what, step.module, step.packages, str(out), ldflags=step.ldflags, tags=step.tags
        )
    still = missing(directory)
    if still:
        raise BuildError(f"build finished but these binaries are missing: {', '.join(still)}")
    return timings

"""Starting, checking and stopping the sandbox's processes, always by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class StartError(RuntimeError):
    """A sandbox component did not start or did not become healthy in time."""


@dataclass(frozen=True, slots=True)
class Proc:
    """A process the sandbox started: its name, pid, binary and log file."""

    name: str
    pid: int
    binary: str
    log: str
    argv: list[str] | None = None
    """The whole command line, so that `Sandbox.restart` can start it again."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(name: str, argv: list[str], log_dir: Path) -> Proc:
    """Start a detached process (own session) that outlives the `atoll` command."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with open(log, "ab") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return Proc(name=name, pid=child.pid, binary=argv[0], log=str(log), argv=list(argv))


def is_ours(proc: Proc) -> bool:
    """The pid is alive and still runs the binary we started (guards against pid reuse)."""
    try:
        exe = os.readlink(f"/proc/{proc.pid}/exe")
    except OSError:
        return False
    return os.path.realpath(exe.removesuffix(" (deleted)")) == os.path.realpath(proc.binary)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(proc: Proc, *, grace: float = 10.0) -> bool:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; only if the pid is still ours."""
    if not is_ours(proc):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(proc.pid)
        if not is_ours(proc):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    for _ in range(50):
        _reap(proc.pid)
        if not is_ours(proc):
            break
        time.sleep(0.1)
    return True


def rss_mib(pid: int) -> float:
    """Resident memory (VmRSS) of a process in MiB; 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(proc: Proc, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `check` until it is true; fail with the log's tail if the process dies or time ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_ours(proc):
            _reap(proc.pid)
            raise StartError(f"{proc.name} exited while waiting for {what}:\n{tail(proc.log)}")
        if check():
            return
        time.sleep(0.2)
    raise StartError(f"{proc.name}: {what} not reached in {timeout:.0f}s:\n{tail(proc.log)}")


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """GET `url` answers 200 (any error counts as not yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def http_served(url: str, context: ssl.SSLContext | None = None) -> bool:
    """POST an empty body to `url`: True once anything but 404 answers (a handler is
    registered at that path; it may refuse the empty body). Connection errors: not yet."""
    request = urllib.request.Request(url, data=b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context):
            return True
    except urllib.error.HTTPError as e:
        return e.code != 404
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def client_tls(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def insecure_tls() -> ssl.SSLContext:
    """For the health endpoints of the controller-manager and scheduler (self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx

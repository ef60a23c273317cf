"""What the sandbox benchmarks share: starting `atoll run` as a process of a sandbox."""

from __future__ import annotations

import sys
import time
import urllib.request

from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.processes import free_port


def start_operator(sb: Sandbox) -> int:
    """`atoll run` against the sandbox (no leader election, free ports), once it is ready;
    returns its pid (the sandbox stops it with the rest)."""
    health = free_port()
    proc = sb.add_process(
        "atoll-operator",
        [
            sys.executable,
            "-m",
            "atoll",
            "run",
            "--kubeconfig",
            str(sb.kubeconfig),
            "--no-leader-elect",
            "--metrics-bind-address",
            f"127.0.0.1:{free_port()}",
            "--health-bind-address",
            f"127.0.0.1:{health}",
            "--webhook-bind-address",
            f"127.0.0.1:{free_port()}",
        ],
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc.pid
        except OSError:
            time.sleep(0.3)
    raise SystemExit("operator did not become ready")

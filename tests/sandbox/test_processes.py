"""Process supervision: stop only what we started, by pid."""

from __future__ import annotations

import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from atoll.sandbox.cluster import Sandbox, SandboxState
from atoll.sandbox.processes import Proc, StartError, free_port, is_ours, spawn, stop, wait_until

SLEEP = shutil.which("sleep") or "/bin/sleep"


def test_spawned_process_is_stopped_by_pid(tmp_path: Path) -> None:
    proc = spawn("sleeper", [SLEEP, "300"], tmp_path)
    assert is_ours(proc)
    assert stop(proc, grace=5)
    assert not is_ours(proc)


def test_a_pid_running_another_binary_is_never_signalled(tmp_path: Path) -> None:
    proc = spawn("sleeper", [SLEEP, "300"], tmp_path)
    impostor = Proc(name="x", pid=proc.pid, binary="/bin/true", log=proc.log)
    try:
        assert not is_ours(impostor)
        assert not stop(impostor)
        assert is_ours(proc)
    finally:
        stop(proc)


def test_wait_until_reports_a_dead_process_with_its_log(tmp_path: Path) -> None:
    proc = spawn("false", [shutil.which("sh") or "/bin/sh", "-c", "echo boom; exit 3"], tmp_path)
    time.sleep(0.2)
    with pytest.raises(StartError, match="boom"):
        wait_until(proc, lambda: False, timeout=5, what="nothing")


def test_free_port_is_on_loopback_and_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        assert s.getsockname() == ("127.0.0.1", port)


def _state_of(proc: Proc) -> str:
    """The process state letter in /proc/PID/stat (S sleeping, T stopped, …)."""
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_component_is_paused_resumed_and_restarted_with_its_command_line(
    tmp_path: Path,
) -> None:
    sandbox = Sandbox(root=tmp_path / "sb")
    state = SandboxState(procs=[spawn("dummy", [SLEEP, "300"], tmp_path / "logs")])
    sandbox._save(state)
    first = state.procs[0]
    try:
        sandbox.signal("dummy", signal.SIGSTOP)
        wait_until(first, lambda: _state_of(first) == "T", timeout=5, what="stopped")
        sandbox.signal("dummy", signal.SIGCONT)
        wait_until(first, lambda: _state_of(first) != "T", timeout=5, what="resumed")

        second = sandbox.restart("dummy")

        assert not is_ours(first)
        assert is_ours(second)
        assert second.pid != first.pid
        assert second.argv == [SLEEP, "300"]
        (recorded,) = sandbox.load_state().procs  # type: ignore[union-attr]
        assert recorded.pid == second.pid
        with pytest.raises(StartError, match="still running"):
            sandbox.start_component("dummy")
    finally:
        sandbox.down(log=lambda _m: None)
    assert not is_ours(second)

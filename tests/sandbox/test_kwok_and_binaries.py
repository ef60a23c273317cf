"""KWOK stage config and the binary cache layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from atoll.sandbox import binaries, kwok


def test_kwok_config_has_node_and_pod_lifecycle_stages() -> None:
    docs = [d for d in yaml.safe_load_all(kwok.stages(default_run_ms=1234)) if d]
    names = {d["metadata"]["name"]: d for d in docs}
    assert all(d["kind"] == "Stage" for d in docs)
    assert {"atoll-node-ready", "atoll-pod-running", "atoll-pod-complete", "atoll-pod-delete"} <= (
        set(names)
    )
    delay = names["atoll-pod-complete"]["spec"]["delay"]
    assert delay["durationMilliseconds"] == 1234
    assert kwok.RUN_DURATION_ANNOTATION in delay["durationFrom"]["expressionFrom"]


def test_binary_cache_is_keyed_by_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATOLL_SANDBOX_BIN", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", "/tmp/atoll-cache-test")
    path = binaries.bin_dir()
    assert path.parts[:3] == ("/", "tmp", "atoll-cache-test")
    for version in (binaries.K8S_VERSION, binaries.ETCD_VERSION, binaries.KWOK_VERSION):
        assert version in str(path)


def test_missing_lists_every_binary_of_an_empty_folder(tmp_path: Path) -> None:
    assert binaries.missing(tmp_path) == list(binaries.ALL_BINARIES)
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    assert "etcd" not in binaries.missing(tmp_path)


def test_wrapper_modules_pin_the_documented_versions() -> None:
    modules = binaries.modules_dir()
    k8s = (modules / "k8s" / "go.mod").read_text()
    assert f"k8s.io/kubernetes {binaries.K8S_VERSION}" in k8s
    assert "k8s.io/client-go v0.37.2" in k8s
    assert binaries.ETCD_VERSION in (modules / "etcd" / "go.mod").read_text()
    assert binaries.KWOK_VERSION in (modules / "kwok" / "go.mod").read_text()

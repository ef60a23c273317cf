"""`atoll.sandbox.crds`: applying crds/ again keeps the URL a sandbox operator gave a CRD's
conversion webhook (the API server refuses a Service and a URL at once)."""

from __future__ import annotations

import copy
from typing import Any

from atoll.api import crdgen
from atoll.sandbox.crds import with_live_urls

CRDS = {spec.name: crdgen.crd(spec) for spec in crdgen.KINDS}
CQ = "clusterqueues.kueue.x-k8s.io"
URL = {"url": "https://127.0.0.1:9443/convert", "caBundle": "Q0E="}


def _live(name: str, client_config: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(CRDS[name])
    crd["spec"]["conversion"]["webhook"]["clientConfig"] = client_config
    return crd


def test_a_converting_crd_keeps_the_url_it_has_and_the_rest_is_applied_as_generated() -> None:
    documents = list(CRDS.values())
    unchanged = copy.deepcopy(documents)
    out = with_live_urls(documents, {CQ: _live(CQ, {**URL, "service": None})})
    by_name = {d["metadata"]["name"]: d for d in out}
    assert by_name[CQ]["spec"]["conversion"]["webhook"]["clientConfig"] == URL
    assert {k: v for k, v in by_name[CQ]["spec"].items() if k != "conversion"} == {
        k: v for k, v in CRDS[CQ]["spec"].items() if k != "conversion"
    }
    for name, doc in by_name.items():
        if name != CQ:
            assert doc == CRDS[name]
    assert documents == unchanged  # the input is not changed


def test_a_crd_installed_with_the_service_or_not_installed_is_applied_as_generated() -> None:
    service = CRDS[CQ]["spec"]["conversion"]["webhook"]["clientConfig"]
    live = {CQ: _live(CQ, {**service, "caBundle": "Q0E="})}
    assert with_live_urls(list(CRDS.values()), live) == list(CRDS.values())
    assert with_live_urls(list(CRDS.values()), {}) == list(CRDS.values())

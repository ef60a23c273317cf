"""`atoll.kube` imports kubernetes_asyncio's API classes and models on first use: the same
classes, typed responses still deserialize, and most models are never imported. Each check
runs in a fresh interpreter (the test process has imported the whole client already)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "operator"


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(OPERATOR)},
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_client_resolves_names_on_first_use_and_typed_responses_deserialize() -> None:
    out = _run(
        """
        import asyncio, json, sys
        import atoll.kube.writers  # the package installs the lazy client first
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.api.batch_v1_api import BatchV1Api

        assert type(sys.modules["kubernetes_asyncio.client"]).__name__ == "_LazyPackage"
        assert client.BatchV1Api is BatchV1Api
        class Resp:
            data = json.dumps({"metadata": {"name": "j", "namespace": "n"},
                               "spec": {"template": {"spec": {"containers": []}}}})
        async def parse():
            async with client.ApiClient() as api:
                return api.deserialize(Resp(), "V1Job")
        job = asyncio.run(parse())
        assert isinstance(job, client.V1Job) and job.metadata.name == "j"
        assert client.models.V1Job is client.V1Job
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        print(len(loaded))
        """
    )
    assert 0 < int(out) < 50


def test_an_unknown_name_is_an_attribute_error() -> None:
    out = _run(
        """
        import atoll.kube
        from kubernetes_asyncio import client
        try:
            client.NoSuchApi
        except AttributeError as e:
            print(e)
        """
    )
    assert "NoSuchApi" in out


def test_a_client_imported_before_is_left_alone() -> None:
    out = _run(
        """
        import sys
        import kubernetes_asyncio.client
        import atoll.kube
        print(type(sys.modules["kubernetes_asyncio.client"]).__name__)
        """
    )
    assert out == "module"


def test_the_operator_loads_cel_when_it_needs_it_and_never_cryptography() -> None:
    out = _run(
        """
        import sys
        import atoll.kube.operator
        before = sorted(m for m in ("cel_expr_python", "cryptography") if m in sys.modules)
        from atoll.state.cel import SelectorCompiler
        from atoll.kube import webhook
        selector = SelectorCompiler().compile('device.driver == "gpu.example.com"')
        server = webhook.make_url_server(addr="127.0.0.1", port=0, host="127.0.0.1")
        after = sorted(m for m in ("cel_expr_python", "cryptography") if m in sys.modules)
        print(before, after, selector.expression, bool(server.ca))
        """
    )
    # the webhook certificate is made in a child process (webhook.serving_certificate)
    assert out == "[] ['cel_expr_python'] device.driver == \"gpu.example.com\" True"

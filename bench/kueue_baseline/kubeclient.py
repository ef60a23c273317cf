"""A small aiohttp client for the benchmark's own traffic (generator and runner), built from a
kubeconfig with client-certificate data (the sandbox's). No client-side rate limit: the
benchmark's load is the same for both controllers and must not be what limits them."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import yaml


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:400]}")
        self.status = status


class KubeClient:
    def __init__(self, server: str, ssl_ctx: ssl.SSLContext, connections: int = 64) -> None:
        self.server = server.rstrip("/")
        self._ssl = ssl_ctx
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path, connections: int = 64) -> KubeClient:
        cfg = yaml.safe_load(path.read_text())
        ctx_name = cfg["current-context"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        ssl_ctx = ssl.create_default_context(cadata=ca)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "c.crt", Path(tmp) / "c.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            ssl_ctx.load_cert_chain(str(cert), str(key))
        return cls(cluster["server"], ssl_ctx, connections)

    async def __aenter__(self) -> KubeClient:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            read_bufsize=2**22,
        )
        return self

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use `async with KubeClient(...)`"
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        async with self.session.request(
            method,
            self.server + path,
            data=data,
            headers=headers,
            params=params,
            # a minute for the server's answer; no limit on the wait for one of the pool's
            # connections (the large-scale generator queues thousands of creates behind them)
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60),
        ) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise ApiError(resp.status, text)
            return dict(json.loads(text)) if text else {}

    async def watch(
        self, path: str, resource_version: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (dicts with type and object) from `resource_version`, one connection;
        the caller re-lists or resumes when it ends."""
        q = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "3600",
            **(params or {}),
        }
        async with self.session.get(
            self.server + path, params=q, timeout=aiohttp.ClientTimeout(total=None)
        ) as resp:
            if resp.status >= 300:
                raise ApiError(resp.status, await resp.text())
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

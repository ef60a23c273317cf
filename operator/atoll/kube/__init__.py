"""Kubernetes edge: the only layer that imports kopf and kubernetes_asyncio.

Handlers parse raw objects into `atoll.api` models, hand them to `atoll.state` and wake the
scheduling loop; writers apply decisions to the API server.

Importing this package first installs `lazyclient` (kubernetes_asyncio's API classes and
models imported on first use: ~30 MiB less resident memory) and imports structlog without
rich (`plainlog`: ~4 MiB less).
"""

from atoll.kube import lazyclient, plainlog

lazyclient.install()  # before any module of this package imports kubernetes_asyncio
plainlog.install()  # before any module of this package imports structlog

"""Kubernetes edge: the only layer that imports kopf and kubernetes_asyncio.

Handlers parse raw objects into `atoll.api` models, hand them to `atoll.state` and wake the
scheduling loop; writers apply decisions to the API server.
"""

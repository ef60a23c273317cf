"""Printing exact integer quantities the way Kubernetes writes them.

Mirrors the canonical form of k8s.io/apimachinery resource.Quantity as Kueue prints it in
pending messages (pkg/resources ResourceFormatter): `cpu` is held in milli-units, memory and
storage in bytes, everything else in whole units.
"""

from __future__ import annotations

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_BYTES = ("memory", "ephemeral-storage", "storage")


def is_milli(resource: str) -> bool:
    return resource == "cpu"


def format_quantity(resource: str, amount: int) -> str:
    if is_milli(resource):
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in _BYTES or resource.startswith("hugepages-"):
        for suffix, size in _BINARY:
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)

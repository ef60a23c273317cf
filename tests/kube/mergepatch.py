"""RFC 7386's MergePatch as its section 2 writes it: the reference the tests check atoll's
merge patches (the writer's) and JSON patches (the webhook server's) against."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """`doc` with the merge patch `patch` applied (neither is changed)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(doc) if isinstance(doc, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out

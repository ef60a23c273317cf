"""`atoll crds [--out DIR]`: write the CustomResourceDefinitions generated from the API models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from atoll.api import crdgen


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "crds",
        help="generate the Kueue v1beta2 CRDs from atoll's API models",
        description=(
            "Generate the kueue.x-k8s.io/v1beta2 CustomResourceDefinitions. With --out, write "
            "one file per kind into DIR (install them with `kubectl apply --server-side -f "
            "DIR`); without it, print them all as one YAML stream."
        ),
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="directory to write crds into")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    documents = crdgen.generate()
    out: Path | None = args.out
    if out is None:
        sys.stdout.write("".join(documents[name] for name in sorted(documents)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    stale = {p.name for p in out.glob("*.yaml")} - set(documents)
    for name, text in sorted(documents.items()):
        (out / name).write_text(text)
    for name in sorted(stale):
        if name.startswith("kueue.x-k8s.io_"):
            (out / name).unlink()
    print(f"wrote {len(documents)} CRDs to {out}")
    return 0

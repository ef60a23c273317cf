"""`atoll topology discover`: the NVLink islands of this node's GPUs (NVML, else
`nvidia-smi topo -m`, or a saved output), printed and optionally published on the Node.
`atoll topology show`: what atoll reads about GPUs and islands on each node of a cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from atoll.agent import nvidiasmi, nvml
from atoll.agent.gputopology import GpuTopology, describe, published
from atoll.api.islands import ISLANDS_ANNOTATION
from atoll.kube import live, nodelabels
from atoll.state.gpunodes import gpu_nodes

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1


def _err(message: str) -> None:
    print(f"atoll topology: {message}", file=sys.stderr)


def _read(args: argparse.Namespace) -> GpuTopology:
    """Raises TopologyParseError (bad input), or OSError / NvmlError / SmiError."""
    if args.from_fixture:
        path = Path(args.from_fixture)
        topology = nvidiasmi.parse(path.read_text(), source=str(path))
        if args.ids_fixture:
            topology = nvidiasmi.parse_ids(Path(args.ids_fixture).read_text(), topology)
        return topology
    if args.reader in ("auto", "nvml"):
        api = nvml.load()
        if api is not None:
            return nvml.read(api)
        if args.reader == "nvml":
            raise nvml.NvmlError("nvidia-ml-py is not installed (pip install 'atoll[nvml]')")
    return nvidiasmi.read()


def _discover(args: argparse.Namespace) -> int:
    node = args.node or os.environ.get("NODE_NAME")
    if args.publish and not node:
        _err("--publish needs --node NAME (or the NODE_NAME environment variable)")
        return EXIT_BAD_INPUT
    try:
        found = published(_read(args))
    except nvidiasmi.TopologyParseError as e:
        _err(f"{e}; nothing published")
        return EXIT_BAD_INPUT
    except OSError as e:
        _err(f"cannot read {e.filename or 'input'}: {e.strerror or e}")
        return EXIT_BAD_INPUT
    except (nvml.NvmlError, nvidiasmi.SmiError) as e:
        _err(f"{e}; nothing published")
        return EXIT_UNAVAILABLE
    if args.json:
        print(json.dumps({"labels": found.labels(), "islands": found.to_dict()}))
    else:
        print(describe(found))
    if not args.publish:
        return 0
    assert node is not None
    try:
        asyncio.run(
            nodelabels.publish(
                Path(args.kubeconfig) if args.kubeconfig else None,
                node,
                found.labels(),
                {ISLANDS_ANNOTATION: found.annotation()},
            )
        )
    except nodelabels.PublishError as e:
        _err(str(e))
        return EXIT_UNAVAILABLE
    if not args.json:
        labels = ", ".join(f"{k}={v}" for k, v in found.labels().items())
        print(f"published on node {node}: {labels} and annotation {ISLANDS_ANNOTATION}")
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        cache, _ = asyncio.run(live.read(Path(args.kubeconfig) if args.kubeconfig else None))
    except live.ClusterReadError as e:
        _err(str(e))
        return EXIT_UNAVAILABLE
    views = gpu_nodes(cache.inventory)
    if args.json:
        print(json.dumps([v.to_json() for v in views]))
    elif not views:
        print("no node with GPUs, GPU Feature Discovery labels, islands or DRA devices")
    else:
        print("\n".join(v.describe() for v in views))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "topology",
        help="NVLink islands: discover them on a node, show what atoll reads per node",
        description="NVLink islands of GPU nodes and what atoll reads about them.",
    )
    cmds = p.add_subparsers(dest="topology_command", metavar="SUBCOMMAND")
    d = cmds.add_parser(
        "discover",
        help="find this node's NVLink islands (NVML, nvidia-smi or a saved output)",
        description=(
            "Reads the NVLink topology of this node's GPUs through NVML (nvidia-ml-py, when "
            "installed) or by parsing `nvidia-smi topo -m`, or from a saved output "
            "(--from-fixture), and prints its islands: connected groups of NVLinked GPUs with "
            "their GPU indices, NVLink count and size. With --publish it sets the Node labels "
            "atoll.dev/nvlink-island-max and atoll.dev/nvlink-island-sizes and the annotation "
            f"{ISLANDS_ANNOTATION} (JSON: GPUs by index, bus ID and UUID per island); without "
            "it nothing in the cluster changes. Malformed input: exit code 2, nothing published."
        ),
    )
    d.add_argument(
        "--from-fixture",
        metavar="FILE",
        help="read a saved `nvidia-smi topo -m` output instead of the node's GPUs",
    )
    d.add_argument(
        "--ids-fixture",
        metavar="FILE",
        help="with --from-fixture: a saved `nvidia-smi --query-gpu=index,pci.bus_id,uuid "
        "--format=csv,noheader` output (adds bus IDs and UUIDs)",
    )
    d.add_argument(
        "--reader",
        choices=("auto", "nvml", "nvidia-smi"),
        default="auto",
        help="how to read the node's GPUs (default auto: NVML when installed, else nvidia-smi)",
    )
    d.add_argument("--publish", action="store_true", help="write the islands onto the Node")
    d.add_argument("--node", metavar="NAME", help="the Node to publish on (default $NODE_NAME)")
    d.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="cluster to publish to (default: in-cluster service account, else $KUBECONFIG)",
    )
    d.add_argument("--json", action="store_true", help="print the labels and islands as JSON")
    d.set_defaults(func=_discover)
    s = cmds.add_parser(
        "show",
        help="per node: GPUs, GPU Feature Discovery labels, NVLink islands, DRA devices",
        description=(
            "Reads the cluster (read-only) the way the operator does and prints, for every "
            "node with GPUs: its nvidia.com/gpu count, GPU Feature Discovery labels (product, "
            "memory, clique), the NVLink islands atoll knows (published by `atoll topology "
            "discover`, or DRA device attributes), and its DRA devices per driver."
        ),
    )
    s.add_argument("--kubeconfig", metavar="FILE", help="cluster to read (default: $KUBECONFIG)")
    s.add_argument("--json", action="store_true", help="print one JSON object per node")
    s.set_defaults(func=_show)
    p.set_defaults(func=lambda _args: p.print_help() or EXIT_BAD_INPUT)

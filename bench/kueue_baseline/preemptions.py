"""Who preempted whom in a benchmark run, and how soon after their admission the victims
went: read from the runner's timeline (`timeline.json` in each run's directory).

    python bench/kueue_baseline/preemptions.py RUN_DIR [RUN_DIR ...]

For each run, from the Workload changes the runner saw on its watch:
- the preemptors by class, and their victims by where they ran (the preemptor's own
  ClusterQueue, or another one of its cohort: reclamation);
- victims evicted soon after their admission (under 0.5 s): quota handed to a Workload only
  to be taken back at once, the churn a controller should not make;
- each Workload's first outcome (admitted, pending, or preempting for it) by class, with the
  median delay from its creation.

The times are the runner's: under load its watch may see a change a few hundred
milliseconds after the controller made it, so they are a lens on both controllers, not on
either one's own state. A controller's own reasons are in its log.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

SOON_S = 0.5
"""A victim evicted this soon after its admission counts as churn."""


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """The counts `report` prints, from one timeline document."""
    wls: dict[str, list[Any]] = doc["workloads"]
    created: dict[str, float] = {}
    admitted: dict[str, float] = {}
    first: dict[str, tuple[str, float]] = {}
    preemptors: Counter[str] = Counter()
    victims: Counter[str] = Counter()
    soon: Counter[str] = Counter()
    seen: set[str] = set()
    for t, uid, kind, preemptor in doc["events"]:
        cq, cls = wls[uid][0], wls[uid][1]
        if kind == "create":
            created[uid] = t
        elif kind == "admit":
            admitted[uid] = t
            first.setdefault(uid, ("admitted", t))
        elif kind.startswith("pending"):
            first.setdefault(uid, ("pending", t))
        elif kind == "evict" and preemptor in wls:
            pcq, pcls = wls[preemptor][0], wls[preemptor][1]
            first.setdefault(preemptor, ("preempting", t))
            if preemptor not in seen:
                seen.add(preemptor)
                preemptors[pcls] += 1
            where = "own ClusterQueue" if cq == pcq else "another ClusterQueue"
            victims[f"{cls} by {pcls}, {where}"] += 1
            if uid in admitted and t - admitted[uid] < SOON_S:
                soon[f"{cls} by {pcls}, {where}"] += 1
    outcomes: dict[str, dict[str, list[float]]] = {}
    for uid, (what, t) in first.items():
        if uid in created:
            cls = wls[uid][1]
            outcomes.setdefault(cls, {}).setdefault(what, []).append(t - created[uid])
    return {
        "preemptors": dict(preemptors),
        "victims": dict(victims.most_common()),
        "soon": dict(soon.most_common()),
        "first": {
            cls: {w: (len(v), statistics.median(v)) for w, v in sorted(by.items())}
            for cls, by in sorted(outcomes.items())
        },
    }


def report(name: str, s: dict[str, Any]) -> list[str]:
    lines = [f"== {name}"]
    lines.append(f"preemptors by class: {s['preemptors'] or 'none'}")
    lines.append(f"victims ({sum(s['victims'].values())}):")
    lines += [f"  {n:>5}  {k}" for k, n in s["victims"].items()]
    lines.append(f"victims evicted < {SOON_S} s after their admission ({sum(s['soon'].values())}):")
    lines += [f"  {n:>5}  {k}" for k, n in s["soon"].items()]
    lines.append("first outcome after creation (count, median delay):")
    for cls, by in s["first"].items():
        lines.append(f"  {cls}: " + ", ".join(f"{w} {n} ({d:.2f} s)" for w, (n, d) in by.items()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories with a timeline.json")
    args = ap.parse_args()
    for d in args.runs:
        path = d / "timeline.json" if d.is_dir() else d
        print("\n".join(report(str(d), summarize(json.loads(path.read_text())))))


if __name__ == "__main__":
    main()

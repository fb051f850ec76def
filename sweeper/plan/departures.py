"""A spec that claims the paper's protocol (`protocol: paper`) against it: each setting whose value
differs from the table in sweeper.plan.protocol, with the spec's value, the paper's and where the
paper's comes from; the deliberate departures with their reason. Also the markdown table of
docs/paper-protocol.md, rendered from the same data (one source of truth).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sweeper.plan.protocol import PAPER_PROTOCOL, ProtocolItem, retrieval_negatives

DOC = "docs/paper-protocol.md"


@dataclass(frozen=True, kw_only=True, slots=True)
class Departure:
    item: ProtocolItem
    value: object
    """The spec's value."""


def departures(spec, plan) -> list[Departure]:
    """Every item of the table whose value in this spec and plan is not the paper's, in table order."""
    found = []
    for item in PAPER_PROTOCOL:
        if item.read is None:
            continue
        value = item.read(spec, plan)
        if value != item.paper:
            found.append(Departure(item=item, value=value))
    return found


def once_each(names: set, replicates: dict[str, tuple[str, int]]) -> list[str]:
    """Run names with the replicates of one configuration written once, with their count
    (`610m-clm-42k (x8 replicates)`); `replicates`: each run name's configuration (replicate 0's
    name) and that configuration's run count."""
    arms = {replicates.get(name, (name, 1)) for name in names}
    return [f"{arm} (x{count} replicates)" if count > 1 else arm for arm, count in sorted(arms)]


def shown(value, paper=None, replicates: dict[str, tuple[str, int]] | None = None) -> str:
    """A value as the printout and the table write it; a mapping or set that differs from the
    paper's: only what differs (a set of run names: each configuration once, `once_each`)."""
    if isinstance(value, (set, frozenset)):
        if isinstance(paper, (set, frozenset)):
            missing, extra = once_each(paper - value, replicates or {}), once_each(value - paper, replicates or {})
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"extra {', '.join(extra)}"] if extra else []
            )
            return "; ".join(parts) or f"{len(value)} runs"
        return f"{len(value)} runs"
    if isinstance(value, dict):
        if isinstance(paper, dict):
            keys = [k for k in {**paper, **value} if value.get(k) != paper.get(k)]
            return "; ".join(f"{k}: {shown(value.get(k, '-'))}" for k in keys) or "as listed"
        return "; ".join(f"{k}: {shown(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(shown(v) for v in value) + ")"
    return str(value)


def departure_lines(spec, plan) -> list[str]:
    """The plan's lines about the protocol: none for a spec that claims none."""
    if getattr(spec, "protocol", None) != "paper":
        return []
    found = departures(spec, plan)
    deliberate = [d for d in found if d.item.deliberate]
    other = [d for d in found if not d.item.deliberate]
    if not other:
        head = f"  departures from the paper ({DOC}): none" + (
            f" but {len(deliberate)} deliberate" if deliberate else "")
    else:
        head = f"  departures from the paper ({DOC}): {len(other)}" + (
            f", and {len(deliberate)} deliberate" if deliberate else "")
    lines = [head]
    counts = Counter(run.arm for run in plan.runs)
    replicates = {run.name: (run.arm, counts[run.arm]) for run in plan.runs}
    for departure in other + deliberate:
        item = departure.item
        why = f"; deliberate: {item.deliberate}" if item.deliberate else f"; set {item.setting}"
        lines.append(
            f"    {item.item}: {shown(departure.value, item.paper, replicates)} here, "
            f"{shown(item.paper, departure.value) if not isinstance(item.paper, (set, dict)) else 'as listed'} "
            f"in the paper ({item.source}){why}"
        )
    return lines


def protocol_lines(spec, plan, verbose: bool = False) -> list[str]:
    """What `sweeper plan` prints about the protocol: the departures of a `protocol: paper` spec,
    and with -v the retrieval negatives per query of any spec that trains retrieval."""
    lines = departure_lines(spec, plan)
    if verbose and (negatives := retrieval_negatives(spec)) is not None:
        lines.append(
            f"  retrieval negatives per query: {negatives} (every other pair of the effective retrieval batch)"
        )
    return lines


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(spec, plan) -> str:
    """docs/paper-protocol.md's table: item, paper value, source, sweeper value (this spec's),
    the setting that changes it, and whether it departs."""
    rows = ["| item | paper | source | sweeper (paper.yaml) | setting that changes it | departs |",
            "|---|---|---|---|---|---|"]
    for item in PAPER_PROTOCOL:
        if item.read is None:
            value, departs = "as the paper", "no (fixed in code)"
        else:
            read = item.read(spec, plan)
            same = read == item.paper
            value = "as the paper" if same else shown(read, item.paper)
            departs = "no" if same else (f"deliberate: {item.deliberate}" if item.deliberate else "**yes**")
        paper = shown(item.paper) if not isinstance(item.paper, (set, frozenset)) else f"{len(item.paper)} runs (below)"
        rows.append("| " + " | ".join(cell(text) for text in (item.item, paper, item.source, value, item.setting,
                                                                 departs)) + " |")
    return "\n".join(rows) + "\n"


def paper_table() -> str:
    """The table for search_spaces/paper.yaml, as docs/paper-protocol.md holds it."""
    from pathlib import Path

    from sweeper.plan.load import load_study

    study = load_study(Path(__file__).resolve().parents[2] / "search_spaces" / "paper.yaml")
    return markdown_table(study.spec, study.plan)


if __name__ == "__main__":  # python -m sweeper.plan.departures: the table to paste into docs/paper-protocol.md
    print(paper_table(), end="")

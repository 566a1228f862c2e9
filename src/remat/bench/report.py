"""`remat bench`'s markdown: one table per model, from the rows `{(framework, plan): {...}}`.

A time cell is the median over rounds of a per-round ratio, with its spread (min–max): in each
round every step ran once, so the two steps of a ratio ran moments apart and load on the
machine changes both alike.
"""

from __future__ import annotations

import statistics

from remat.bench.config import plan_name, plans_of, size_of
from remat.bench.timing import ratios

LABELS = {
    "remat-numpy": "remat · NumPy", "remat-xla": "remat · XLA",
    "jax": "jax.checkpoint", "torch": "torch.utils.checkpoint",
}
MiB = 2**20


def ratio(row: dict | None, base: dict | None) -> str:
    """`median (min–max)` of `row`'s step time over `base`'s, round by round; "n/a" without both."""
    if not row or not base or "times" not in row or "times" not in base:
        return "n/a"
    if row is base:
        return "1.00x"
    rs = ratios(row["times"], base["times"])
    return f"{statistics.median(rs):.2f}x ({min(rs):.2f}–{max(rs):.2f})"


def table(model: str, quick: bool, rows: dict, frameworks: list[str]) -> str:
    plans = plans_of(model)
    cols = [f for f in frameworks if any((f, p) in rows for p in plans)]
    head = ["plan"] + [h for f in cols for h in (f"{LABELS[f]} peak MiB", "time")]
    both = "remat-xla" in cols and "jax" in cols
    if both:
        head.append("remat · XLA ÷ JAX time")
    lines = [f"**{size_of(model, quick).describe()}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for plan in plans:
        cells = [plan_name(model, plan)]
        for f in cols:
            row, base = rows.get((f, plan)), rows.get((f, "none"))
            cells += [_peak(row, base), ratio(row, base)]
        if both:
            cells.append(ratio(rows.get(("remat-xla", plan)), rows.get(("jax", plan))))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", notes(rows)]
    return "\n".join(lines)


def _peak(row: dict | None, base: dict | None) -> str:
    if not row or "peak" not in row:
        return "n/a"
    peak = f"{row['peak'] / MiB:.1f}"
    if base and base.get("peak"):
        peak += f" ({row['peak'] / base['peak']:.2f}x)"
    return peak


def notes(rows: dict) -> str:
    out = []
    numpy = [r for (f, _), r in rows.items() if f == "remat-numpy" and "tracemalloc" in r]
    if numpy:
        traced = max(abs(r["peak"] - r["tracemalloc"]) / r["tracemalloc"] for r in numpy)
        rss = max(abs(r["peak"] - r["rss"]) for r in numpy) / MiB  # small steps: allocator noise, not %
        out.append(f"remat · NumPy peaks are the evaluator's count; tracemalloc agrees within {traced:.1%}, "
                   f"the rise of resident memory (the others' measure) within {rss:.1f} MiB.")
    losses = [r["loss"] for r in rows.values() if "loss" in r]
    if losses:
        spread = (max(losses) - min(losses)) / max(abs(min(losses)), 1e-30)
        out.append(f"Loss of the step: {losses[0]:.6g} in every framework and plan "
                   f"(largest relative difference {spread:.1e}).")
    return " ".join(out)

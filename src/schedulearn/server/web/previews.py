"""How the Policy preview page reads a `PolicyPreview` (`services.predictions.preview`).

Owns the page's judgements on the figures, kept out of the template: which
policy comes out best (the lowest predicted mean JCT, as the CLI's table
marks it) and the sentence that says what the figures are over.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.protocol import PolicyPreview


def best_spec(preview: PolicyPreview) -> str | None:
    """The policy with the lowest predicted mean JCT; None when fewer than two compare."""
    rows = [p for p in preview.policies if p.mean_jct is not None and p.error is None]
    if len(rows) < 2:
        return None
    best = min(rows, key=lambda p: p.mean_jct or 0.0)
    if all(p.mean_jct == best.mean_jct for p in rows):
        return None  # a tie everywhere: nothing to point at
    return best.spec


def compared_note(preview: PolicyPreview) -> str:
    """What the figures are over, in words."""
    jobs = preview.pending + preview.running
    if jobs == 0:
        return "Nothing is waiting or running, so every policy has nothing to do."
    if preview.compared == jobs:
        return f"Figures are over all {jobs} jobs."
    return (
        f"Figures are over the {preview.compared} of {jobs} jobs whose end every policy "
        "predicts (a job without a duration estimate, or stuck behind one, has none)."
    )


@dataclass(frozen=True, slots=True)
class PreviewPage:
    preview: PolicyPreview
    best: str | None
    note: str


def page_of(preview: PolicyPreview) -> PreviewPage:
    return PreviewPage(preview, best_spec(preview), compared_note(preview))

"""How the Policy preview page reads a `PolicyPreview` (`services.predictions.preview`).

Owns the page's judgements on the figures, kept out of the template: which
policies come out best (the lowest predicted mean JCT, as the CLI's table
marks it) and the sentence that says what the figures are over.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.protocol import PolicyPreview


def best_specs(preview: PolicyPreview) -> frozenset[str]:
    """The policies with the lowest predicted mean JCT (all of them on a tie);
    none when fewer than two have figures, or when every one has the same."""
    jcts = {p.spec: p.mean_jct for p in preview.policies if p.mean_jct is not None and not p.error}
    if len(set(jcts.values())) < 2:
        return frozenset()
    best = min(jcts.values())
    return frozenset(spec for spec, jct in jcts.items() if jct == best)


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
    best: frozenset[str]
    note: str


def page_of(preview: PolicyPreview) -> PreviewPage:
    return PreviewPage(preview, best_specs(preview), compared_note(preview))

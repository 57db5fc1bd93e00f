"""Selection of silver pairs: KDE rejection sampling (regression), class-ratio sampling (classification)."""

from augsbert_ray.selection.diagnostics import high_similarity_share, kl_divergence, silver_diagnostics, thin_silver_warning
from augsbert_ray.selection.kde import (
    AcceptanceCurve, SilverRows, accepted_rows, mark_accepted, pair_uniforms, read_silver, score_histogram, select, write_silver,
)

__all__ = [
    "AcceptanceCurve", "SilverRows", "accepted_rows", "high_similarity_share", "kl_divergence", "mark_accepted", "pair_uniforms",
    "read_silver", "score_histogram", "select", "silver_diagnostics", "thin_silver_warning", "write_silver",
]

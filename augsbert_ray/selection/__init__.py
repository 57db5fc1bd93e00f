"""Selection of silver pairs: KDE rejection sampling (regression), class-ratio sampling (classification)."""

from augsbert_ray.selection.diagnostics import high_similarity_share, kl_divergence, silver_diagnostics
from augsbert_ray.selection.kde import AcceptanceCurve, mark_accepted, pair_uniforms, score_histogram, select

__all__ = ["AcceptanceCurve", "high_similarity_share", "kl_divergence", "mark_accepted", "pair_uniforms", "score_histogram", "select", "silver_diagnostics"]

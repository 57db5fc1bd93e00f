"""Cross-encoder and bi-encoder fits on Ray Train."""

from augsbert_ray.training.bi_encoder import fit_bi_encoder
from augsbert_ray.training.cross_encoder import fit_cross_encoder

__all__ = ["fit_bi_encoder", "fit_cross_encoder"]

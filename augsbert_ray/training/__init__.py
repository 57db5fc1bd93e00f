"""Cross-encoder and bi-encoder fits on Ray Train."""

from augsbert_ray.training.bi_encoder import bi_encoder_loss, fit_bi_encoder
from augsbert_ray.training.cross_encoder import both_orders, fit_cross_encoder
from augsbert_ray.training.ray_fit import TrainFile, read_training_pairs, training_arguments

__all__ = ["TrainFile", "bi_encoder_loss", "both_orders", "fit_bi_encoder", "fit_cross_encoder", "read_training_pairs", "training_arguments"]

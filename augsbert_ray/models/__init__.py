"""Models: resolve the names a job spec uses, assemble packaged models from their parts, check and fingerprint models."""

from augsbert_ray.models.checks import WEIGHT_FILES, check_model, json_object, model_outputs
from augsbert_ray.models.fingerprint import SETTINGS_SUFFIXES, model_fingerprint, model_settings_digest
from augsbert_ray.models.packaged import (
    CACHE_ENV,
    MARKER,
    PACKAGED_MODELS,
    PARTS_ENV,
    ModelPartsError,
    PackagedModel,
    model_cache_dir,
    packaged_model_path,
    remove_leftovers,
)
from augsbert_ray.models.resolve import model_aliases, resolve_model
from augsbert_ray.models.tiny import build_tiny_bert

__all__ = [
    "CACHE_ENV",
    "MARKER",
    "model_aliases",
    "PACKAGED_MODELS",
    "PARTS_ENV",
    "SETTINGS_SUFFIXES",
    "WEIGHT_FILES",
    "ModelPartsError",
    "PackagedModel",
    "build_tiny_bert",
    "check_model",
    "json_object",
    "model_cache_dir",
    "model_fingerprint",
    "model_outputs",
    "model_settings_digest",
    "packaged_model_path",
    "remove_leftovers",
    "resolve_model",
]

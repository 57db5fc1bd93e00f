"""Cross-encoder labeling: one streaming, resumable engine for `augsbert label` and a job's labeling stage."""

from augsbert_ray.labeling.engine import LabelJob, LabelResult, label_files, label_table
from augsbert_ray.labeling.scorer import ShardLabeler

__all__ = ["LabelJob", "LabelResult", "ShardLabeler", "label_files", "label_table"]

"""Teacher labeling: one streaming, resumable engine for `augsbert label` and a job's labeling stage."""

from augsbert_ray.labeling.engine import LabelJob, LabelResult, check_resources, label_dataset, label_files, labels_in_process
from augsbert_ray.labeling.scorer import ShardLabeler
from augsbert_ray.labeling.teacher import TEACHER_FILE, Teacher, TeacherMember

__all__ = ["TEACHER_FILE", "LabelJob", "LabelResult", "ShardLabeler", "Teacher", "TeacherMember", "check_resources", "label_dataset", "label_files", "labels_in_process"]

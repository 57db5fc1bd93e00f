"""Teacher labeling: one streaming, resumable engine for `augsbert label` and a job's labeling stage, and a lazy
labeling of a Ray Dataset (``label``)."""

from augsbert_ray.labeling.dataset import label, load_teacher
from augsbert_ray.labeling.engine import check_resources, label_dataset, label_files, labels_in_process
from augsbert_ray.labeling.job import LabelJob, LabelResult
from augsbert_ray.labeling.plan import plan_shards
from augsbert_ray.labeling.scorer import ShardLabeler
from augsbert_ray.scoring import TEACHER_FILE, Teacher, TeacherMember

__all__ = ["TEACHER_FILE", "LabelJob", "LabelResult", "ShardLabeler", "Teacher", "TeacherMember", "check_resources", "label", "label_dataset", "label_files", "labels_in_process",
           "load_teacher", "plan_shards"]

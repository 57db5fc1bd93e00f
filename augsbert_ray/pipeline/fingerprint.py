"""What a run computes from, recorded when it starts, so that `--resume` cannot continue it with other inputs.

The fingerprint holds the resolved spec (less where Ray runs, what resources work gets and where the data files
lie), a content hash of every data file by its role (so a data folder moved, with its paths in spec.yaml edited to
match, still resumes), and each model's weights fingerprint and its configs' and tokenizer's digest.
It lives in the run directory as .fingerprint.json, which spec.yaml edits do not reach.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from augsbert_ray.config import RESUME_SETTABLE, JobSpec
from augsbert_ray.data.gold import gold_sources
from augsbert_ray.files import atomic_write_text, files_digest
from augsbert_ray.models import model_fingerprint, model_settings_digest, resolve_model

FINGERPRINT_FILE = ".fingerprint.json"
SETTINGS_SUFFIX = ".settings"

# The entries of the fingerprint that each fit depends on (prefixes of its flattened keys), a tuned one on
# spec.tuning too; a fit not named here (an AugSBERT bi-encoder) depends on all of them.
# A transfer source's train holds none of the target's dev and test pairs: the fits on it read the target too
# (its data settings and the files its dev and test come from; a dev may be carved from train).
TARGET_DEV_TEST = ("spec.target.data.", "files.target.train", "files.target.dev", "files.target.test")
FIT_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_encoder": ("spec.seed", "spec.scenario", "spec.data.", "spec.cross_encoder.", "spec.training.", "files.data.", "models.cross_encoder",
                      *TARGET_DEV_TEST),
    "teacher_bi_encoder": ("spec.seed", "spec.scenario", "spec.data.", "spec.teacher.bi_encoder.", "spec.training.", "files.data.",
                           "models.teacher.bi_encoder", *TARGET_DEV_TEST),
    "sbert": ("spec.seed", "spec.data.", "spec.bi_encoder.", "spec.training.", "files.data.", "models.bi_encoder"),
    "sbert_source": ("spec.seed", "spec.data.", "spec.bi_encoder.", "spec.training.", "files.data.", "models.bi_encoder", *TARGET_DEV_TEST),
    "sbert_target": ("spec.seed", "spec.target.data.", "spec.bi_encoder.", "spec.training.", "files.target.", "models.bi_encoder"),
}


# Where the data files lie, which their content hashes (files.*) stand for: a data folder moved, and the paths in
# spec.yaml edited to match, still resumes. (Entries a fingerprint recorded before are ignored likewise.)
DATA_LOCATION = re.compile(r"spec\.(target\.)?data\.((train|dev|test)\.path|data_dir)|spec\.target\.sentences")


def comparable_spec(spec: JobSpec) -> dict[str, Any]:
    """The spec less where Ray runs, how fits survive failures and what resources work gets: none of these
    changes what the run computes. A fit in the calling process (``training.num_workers`` 0) counts as one on one
    worker: the same model, to the bit (training_arguments drops an uneven last batch in both)."""
    settable = {section: set(keys) for section, keys in RESUME_SETTABLE.items()}
    comparable = spec.model_dump(mode="json", exclude={"ray": True, "output_dir": True, **settable})
    comparable["training"]["num_workers"] = max(1, comparable["training"]["num_workers"])
    return comparable


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        return {key: value for name, child in tree.items() for key, value in flatten(child, f"{prefix}{name}.").items()}
    return {prefix.rstrip("."): tree}


def run_fingerprint(spec: JobSpec, data_dir: str | Path | None) -> dict[str, Any]:
    """Flattened ``spec.*``, ``files.<data|target>.<split>`` (content hashes) and ``models.<field>`` entries."""
    if spec.scenario == "retrieval":  # its data section is unused: the corpus, queries and qrels are what it reads
        from augsbert_ray.pipeline.retrieval_data import retrieval_sources

        digests = {f"files.retrieval.{role}": files_digest(paths)[:16] for role, paths in retrieval_sources(spec, data_dir).items()}
        return {**flatten(comparable_spec(spec), "spec."), **digests,
                **{key: value for field, name in run_models(spec).items() for key, value in model_entries(field, resolve_model(name)).items()}}
    files = {f"data.{split}": source.path for split, source in gold_sources(spec.data, data_dir).items()}
    if spec.target is not None:
        files.update({f"target.{split}": source.path for split, source in gold_sources(spec.target.data, data_dir).items()})
        if spec.target.sentences is not None:
            files["target.sentences"] = spec.target.sentences
    spec_entries = {key: value for key, value in flatten(comparable_spec(spec), "spec.").items() if not DATA_LOCATION.fullmatch(key)}
    return {
        **spec_entries,
        **{f"files.{role}": files_digest([Path(path)])[:16] for role, path in files.items()},
        **{key: value for field, name in run_models(spec).items() for key, value in model_entries(field, resolve_model(name)).items()},
    }


def model_entries(field: str, model: str) -> dict[str, str]:
    """``models.<field>``: the weights' fingerprint; ``models.<field>.settings``: its configs' and tokenizer's."""
    return {f"models.{field}": model_fingerprint(model), f"models.{field}{SETTINGS_SUFFIX}": model_settings_digest(model)}


def run_models(spec: JobSpec) -> dict[str, str]:
    """The models a run of ``spec`` loads, by the setting that names them (a fitted model's start, or the model it
    is given already trained).

    Example:
        ::

            run_models(load_spec("jobs/stsb_indomain_bm25.yaml"))["bi_encoder"]  # 'minilm'
    """
    models = {"cross_encoder": spec.cross_encoder.trained or spec.cross_encoder.model, "bi_encoder": spec.bi_encoder.model,
              "evaluation.zero_shot_model": spec.evaluation.zero_shot_model}
    if "bi_encoder" in spec.teacher.member_kinds or spec.evaluation.teacher_bi_encoder:  # fitted: a member, or scored beside
        models["teacher.bi_encoder"] = spec.teacher.bi_encoder.trained or spec.teacher.bi_encoder.model
    if spec.sampling.semantic_model != "gold":
        models["sampling.semantic_model"] = spec.sampling.semantic_model
    return models


def write_fingerprint(run_dir: Path, fingerprint: dict[str, Any]) -> None:
    atomic_write_text(run_dir / FINGERPRINT_FILE, json.dumps(fingerprint, indent=1, sort_keys=True))


def changed_entries(run_dir: Path, now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Entries whose value differs between the run's recorded fingerprint and ``now``: key -> (then, now). A setting
    the tool gained since the run started is no change at its default, which keeps what the tool did before; nor is
    a model's settings digest, which fingerprints gained later."""
    then = {key: value for key, value in json.loads((run_dir / FINGERPRINT_FILE).read_text(encoding="utf-8")).items()
            if not DATA_LOCATION.fullmatch(key)}
    defaults = flatten(comparable_spec(JobSpec()), "spec.")
    gained_at_default = {key for key in now.keys() - then.keys() if key in defaults and now[key] == defaults[key]}
    gained_settings = {key for key in now.keys() - then.keys() if key.endswith(SETTINGS_SUFFIX) and key.startswith("models.")}
    return {key: (then.get(key), now.get(key)) for key in sorted((then.keys() | now.keys()) - gained_at_default - gained_settings)
            if then.get(key) != now.get(key)}


def fit_still_matches(fit: str, changed: dict[str, tuple[Any, Any]], tuned: Collection[str] = ()) -> bool:
    """Whether none of the ``changed`` fingerprint entries is an input of ``fit`` (``tuned``: the fits that are
    seed searches, which depend on spec.tuning too)."""
    inputs = FIT_INPUTS.get(fit)
    if inputs is None:
        return False
    return not any(key.startswith((*inputs, *(("spec.tuning",) if fit in tuned else ()))) for key in changed)


def describe(changed: dict[str, tuple[Any, Any]], limit: int = 6) -> str:
    shown = [f"{key} ({then!r} -> {now!r})" for key, (then, now) in list(changed.items())[:limit]]
    more = len(changed) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")

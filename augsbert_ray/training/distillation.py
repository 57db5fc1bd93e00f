"""The retrieval student: a bi-encoder distilled from the teacher's scores (MarginMSE or listwise KL), and the gold-only
SBERT baseline (MultipleNegativesRankingLoss), both fitted on Ray Train from Parquet rows."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import EncoderSpec, TrainingSpec
from augsbert_ray.training.ray_fit import fit_on_ray, train_and_report, worker_setup
from augsbert_ray.training.reranker import encoder_fields, read_columns, require_steps

DistillationLoss = Literal["margin_mse", "kl"]
StudentLoss = Literal["margin_mse", "kl", "mnrl"]


def query_rows(
    group: pd.DataFrame,
    loss: DistillationLoss,
    num_negatives: int = 4,
    gold: Mapping[str, frozenset[str]] | None = None,
    sampling: Literal["random", "top"] = "random",
    seed: int = 0,
) -> pd.DataFrame:
    """The training rows of one query's teacher-scored candidates (see ``distillation_rows``). It reads nothing but
    the group, and seeds its sampling with (seed, query_id), so it runs as a Ray Data ``map_groups`` function too,
    with the same rows however the candidates are split."""
    if group.empty:
        return pd.DataFrame()
    # one order whatever the input's: by teacher score, ties by doc_id
    group = group.assign(doc_id=group["doc_id"].astype(str)).sort_values(["score", "doc_id"], ascending=[False, True], kind="stable")
    query_id = str(group["query_id"].iloc[0])
    judged = (gold or {}).get(query_id, frozenset())
    relevant = group["doc_id"].isin(judged).to_numpy()
    if judged and not relevant.any():
        return pd.DataFrame()  # its gold documents have no teacher score: no margin to learn
    positive = int(np.argmax(relevant)) if judged else 0  # the best-scored gold document, else the teacher's top one
    others = np.flatnonzero(~relevant & (np.arange(len(group)) != positive))  # a relevant document is no negative
    wanted = num_negatives if loss == "kl" else 1
    if len(others) < wanted:
        return pd.DataFrame()  # listwise rows have a fixed width
    take = min(num_negatives, len(others))
    if sampling == "random":
        rng = np.random.default_rng([seed, zlib.crc32(query_id.encode())])
        others = np.sort(rng.choice(others, size=take, replace=False))  # kept in teacher order
    else:
        others = others[:take]  # the hardest by the teacher
    docs, scores = group["doc"].to_numpy(), group["score"].to_numpy(dtype=np.float64)
    if loss == "margin_mse":
        return pd.DataFrame({
            "query_id": query_id, "query": group["query"].iloc[0], "positive": docs[positive], "negative": docs[others],
            "label": (scores[positive] - scores[others]).astype(np.float32),
        })
    row: dict[str, Any] = {"query_id": [query_id], "query": [group["query"].iloc[0]], "positive": [docs[positive]]}
    row.update({f"negative_{i}": [docs[other]] for i, other in enumerate(others, start=1)})
    row["scores"] = [np.concatenate([[scores[positive]], scores[others]]).astype(np.float32).tolist()]
    return pd.DataFrame(row)


def distillation_rows(
    candidates: pa.Table,
    loss: DistillationLoss,
    num_negatives: int = 4,
    gold: pa.Table | None = None,
    sampling: Literal["random", "top"] = "random",
    seed: int = 0,
) -> pa.Table:
    """Training rows for ``fit_distilled_student`` from teacher-scored candidates.

    Per query, the positive is its gold document (the best-scored one, with several), or for a query without gold the
    teacher's top candidate; the negatives are other candidates, never a gold document of that query. As in GPL, negatives are
    drawn at random from the rest (``sampling="random"``): they span the teacher's scale, which is what a margin or a
    listwise distribution has to teach; ``top`` takes the teacher's highest-scored ones instead.

    Args:
        candidates: ``query_id``, ``query``, ``doc_id``, ``doc``, ``score`` (the teacher's, e.g. its logit).
        loss: ``margin_mse``: a row per (query, positive, negative) with ``label`` = score(positive) - score(negative),
            GPL's margin; ``kl``: a row per query with ``positive``, ``negative_1..num_negatives`` and ``scores``, the
            teacher's scores in that order (queries with fewer candidates are left out).
        num_negatives: Negatives per query.
        gold: ``query_id``, ``doc_id`` of the relevant documents, or None. A query with gold documents, none of them
            among its candidates, is left out (the teacher has not scored them); a query without any takes the
            teacher's top candidate.
        sampling: ``random`` (GPL) or ``top``.
        seed: Seeds the sampling, per query.

    Returns:
        The rows, with ``query_id`` kept for provenance (the student's loop does not read it).

    Example:
        >>> candidates = pa.table({"query_id": ["q"] * 3, "query": ["tea"] * 3, "doc_id": ["a", "b", "c"],
        ...                        "doc": ["tea is good", "coffee", "rain"], "score": [4.0, 1.0, -2.0]})
        >>> distillation_rows(candidates, "margin_mse", num_negatives=2).column("label").to_pylist()
        [3.0, 6.0]
    """
    relevant: dict[str, frozenset[str]] = {}
    if gold is not None:
        for query_id, doc_id in zip(gold.column("query_id").to_pylist(), gold.column("doc_id").to_pylist()):
            relevant[str(query_id)] = relevant.get(str(query_id), frozenset()) | {str(doc_id)}
    frame = candidates.select(["query_id", "query", "doc_id", "doc", "score"]).to_pandas()
    frame["query_id"] = frame["query_id"].astype(str)
    make = functools.partial(query_rows, loss=loss, num_negatives=num_negatives, gold=relevant, sampling=sampling, seed=seed)
    parts = [make(group) for _, group in frame.groupby("query_id", sort=True)]
    parts = [part for part in parts if not part.empty]
    if not parts:
        raise ValueError(f"no query has a positive and enough negatives for {loss} rows ({num_negatives} negatives)")
    return pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False)


def student_columns(names: list[str], loss: StudentLoss) -> list[str]:
    """The columns a student loss reads, texts first (query, then documents), then the label, if any."""
    if loss == "margin_mse":
        return ["query", "positive", "negative", "label"]
    negatives = sorted((name for name in names if name.startswith("negative")), key=lambda name: (len(name), name))
    return ["query", "positive", *negatives, *(["scores"] if loss == "kl" else [])]


def student_loss(model: Any, loss: StudentLoss, temperature: float = 1.0) -> Any:
    """The sentence-transformers loss for a student: MarginMSE and DistillKLDivLoss score by dot product (as GPL and
    the papers do; a model that normalizes its embeddings caps its margins at 2, so a teacher's logits want a scale);
    MNRL by cosine with scale 20, the library's defaults."""
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss, MarginMSELoss, MultipleNegativesRankingLoss

    if loss == "margin_mse":
        return MarginMSELoss(model)
    if loss == "kl":
        return DistillKLDivLoss(model, temperature=temperature)
    return MultipleNegativesRankingLoss(model)


def student_train_loop(config: dict[str, Any]) -> None:
    worker_setup(config)
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    spec = EncoderSpec.model_validate(config["spec"])
    [(path, _)] = config["train_files"]
    table = read_columns(path, student_columns(pq.read_schema(path).names, config["loss"]))
    model = SentenceTransformer(config["model"])
    model.max_seq_length = spec.max_seq_length
    loss = student_loss(model, config["loss"], config["temperature"])
    args_cls = SentenceTransformerTrainingArguments
    if config["loss"] == "mnrl":
        # MNRL takes the batch's other documents as negatives: a query's repeated positive (one triplet per mined
        # negative) or another query's positive among its negatives would be a false one
        args_cls = functools.partial(SentenceTransformerTrainingArguments, batch_sampler=BatchSamplers.NO_DUPLICATES)
    train_and_report(SentenceTransformerTrainer, args_cls, model, loss, table, spec, config, True)


def fit_student(
    spec: EncoderSpec, model: str, train_file: Path, loss: StudentLoss, resources: TrainingSpec, seed: int, storage: Path,
    model_dir: Path, name: str, temperature: float = 1.0,
) -> dict[str, Any]:
    """The shared driver side of ``fit_distilled_student`` and ``fit_gold_baseline``."""
    config = {"spec": encoder_fields(spec), "model": model, "train_files": [(str(train_file), "label")], "seed": seed,
              "loss": loss, "temperature": temperature}
    return require_steps(fit_on_ray(student_train_loop, config, resources, storage, name, model_dir), name, train_file, model_dir)


def fit_distilled_student(
    spec: EncoderSpec,
    model: str,
    train_file: Path,
    loss: DistillationLoss,
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    model_dir: Path,
    name: str | None = None,
    temperature: float = 1.0,
) -> dict[str, Any]:
    """Distill the teacher's scores into a bi-encoder on Ray Train and save it into ``model_dir``.

    Args:
        spec: Epochs, batch size, learning rate, warm-up, max sequence length.
        model: The student's directory or Hugging Face id (``resolve_model("minilm")``).
        train_file: Rows from ``distillation_rows`` made for the same ``loss``: for ``margin_mse``, ``query``,
            ``positive``, ``negative``, ``label`` (the teacher's margin); for ``kl``, ``query``, ``positive``,
            ``negative_1..n``, ``scores`` (a list of n+1 teacher scores).
        loss: ``margin_mse`` (MarginMSELoss) or ``kl`` (DistillKLDivLoss, listwise).
        resources: Ray Train's workers, CPUs, GPU use, bf16 and checkpoint interval.
        seed: Seeds the data order.
        storage: Ray Train's storage; a fit stopped midway resumes from its last checkpoint there.
        model_dir: Where the trained SentenceTransformer is saved.
        name: The fit's name in ``storage`` and in logs; default ``student_<loss>``.
        temperature: DistillKLDivLoss's; match it to the spread of the teacher's scores.

    Returns:
        ``train_loss``, ``train_rows``, ``steps``, ``train_seconds`` and ``resumed_from_step``.

    Example:
        ::

            pq.write_table(distillation_rows(pq.read_table("silver/candidates.parquet"), "margin_mse"), "margins.parquet")
            fit_distilled_student(EncoderSpec(), resolve_model("minilm"), Path("margins.parquet"), "margin_mse",
                                  TrainingSpec(), seed=42, storage=Path("ray_train"), model_dir=Path("models/student"))
    """
    if loss not in ("margin_mse", "kl"):
        raise ValueError(f"loss must be margin_mse or kl, not {loss!r}")
    return fit_student(spec, model, train_file, loss, resources, seed, storage, model_dir, name or f"student_{loss}", temperature)


def fit_gold_baseline(
    spec: EncoderSpec,
    model: str,
    train_file: Path,
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    model_dir: Path,
    name: str = "gold_sbert",
) -> dict[str, Any]:
    """The gold-only SBERT baseline: MultipleNegativesRankingLoss on (query, positive, hard negative) rows, with
    batches that hold no text twice, on Ray Train; saved into ``model_dir``.

    Args:
        spec: Epochs, batch size (MNRL's in-batch negatives: larger is harder), learning rate, warm-up, length.
        model: The base model's directory or Hugging Face id.
        train_file: ``triplet_file`` of ``prepare_gold_files``: ``query``, ``positive``, ``negative`` (or
            ``negative_1..n``).
        resources: Ray Train's workers, CPUs, GPU use, bf16 and checkpoint interval.
        seed: Seeds the data order.
        storage: Ray Train's storage.
        model_dir: Where the trained SentenceTransformer is saved.
        name: The fit's name in ``storage`` and in logs.

    Returns:
        ``train_loss``, ``train_rows``, ``steps``, ``train_seconds`` and ``resumed_from_step``.

    Example:
        ::

            fit_gold_baseline(EncoderSpec(batch_size=32), resolve_model("minilm"), mined.triplet_file, TrainingSpec(),
                              seed=42, storage=Path("ray_train"), model_dir=Path("models/gold_sbert"))
    """
    return fit_student(spec, model, train_file, "mnrl", resources, seed, storage, model_dir, name)

"""The retrieval teacher: hard negatives mined for the gold (query, relevant document) pairs, then a cross-encoder
re-ranker fine-tuned on them on Ray Train.

Mining runs once, in the calling process (the driver), before any fit, and its result is written to Parquet: the
negatives need the whole corpus embedded and searched (a global top-k that every data-parallel worker would
otherwise repeat, on every restart), and a file keeps them fixed across a resumed fit, lets one look at them, and
feeds both the re-ranker and the gold-only SBERT baseline (``fit_gold_baseline``) and KNRM. For a big corpus, call
``prepare_gold_files`` inside a ``ray.remote(num_gpus=1)`` task.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from augsbert_ray.config import EncoderSpec, TrainingSpec
from augsbert_ray.training.ray_fit import fit_on_ray, train_and_report, worker_setup


@dataclass(frozen=True)
class MinedGold:
    """The training files made from the gold pairs and their mined negatives.

    Attributes:
        reranker_file: ``query``, ``document``, ``label`` (float32): 1 for each gold pair, 0 for each mined negative.
        triplet_file: ``query``, ``positive``, ``negative``: one row per mined negative of each gold pair.
        positives: Gold pairs (rows with label 1).
        negatives: Distinct (query, mined negative) pairs (rows with label 0).
    """

    reranker_file: Path
    triplet_file: Path
    positives: int
    negatives: int


def relevant_pairs(queries: pa.Table, corpus: pa.Table, qrels: pa.Table, min_relevance: int = 1) -> pa.Table:
    """The gold (query, relevant document) pairs as text, from the retrieval layout's three tables.

    Args:
        queries: ``query_id``, ``text``.
        corpus: ``doc_id``, ``text``, optionally ``title`` (put before the text, as BEIR's models read a document).
        qrels: ``query_id``, ``doc_id``, ``relevance``.
        min_relevance: The lowest relevance that counts as relevant.

    Returns:
        ``query_id``, ``query``, ``doc_id``, ``document``; qrels naming a missing query or document are left out.

    Example:
        >>> queries = pa.table({"query_id": ["q1"], "text": ["is tea healthy"]})
        >>> corpus = pa.table({"doc_id": ["d1"], "text": ["Tea has antioxidants."]})
        >>> qrels = pa.table({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]})
        >>> relevant_pairs(queries, corpus, qrels).column("document").to_pylist()
        ['Tea has antioxidants.']
    """
    text = corpus.column("text")
    if "title" in corpus.column_names:
        # an empty or null title adds nothing, not a leading space
        title = pc.fill_null(corpus.column("title").cast(pa.string()), "")
        text = pc.if_else(pc.equal(title, ""), text, pc.binary_join_element_wise(title, text, " "))
    docs = pa.table({"doc_id": corpus.column("doc_id").cast(pa.string()), "document": text})
    asked = pa.table({"query_id": queries.column("query_id").cast(pa.string()), "query": queries.column("text")})
    relevant = qrels.filter(pc.greater_equal(qrels.column("relevance"), min_relevance))
    relevant = pa.table({"query_id": relevant.column("query_id").cast(pa.string()), "doc_id": relevant.column("doc_id").cast(pa.string())})
    joined = relevant.join(asked, "query_id", join_type="inner", use_threads=False).join(docs, "doc_id", join_type="inner", use_threads=False)
    return joined.select(["query_id", "query", "doc_id", "document"]).sort_by([("query_id", "ascending"), ("doc_id", "ascending")])


def mine_negatives(
    pairs: pa.Table,
    miner: str,
    corpus: list[str] | None = None,
    num_negatives: int = 4,
    range_min: int = 0,
    range_max: int | None = None,
    relative_margin: float | None = None,
    sampling: Literal["top", "random"] = "top",
    batch_size: int = 32,
    seed: int = 0,
    max_seq_length: int | None = None,
) -> pa.Table:
    """Hard negatives for each gold pair from sentence-transformers' ``mine_hard_negatives``: the documents nearest
    the query by the ``miner`` bi-encoder, leaving out every gold document of that query (``include_positives=False``:
    the pairs with the same query text are its positives, matched by text).

    Args:
        pairs: ``query``, ``document``: every relevant pair of each query (a query's other relevant documents, left
            out here, could be mined as its negatives).
        miner: A SentenceTransformer directory or id (the zero-shot student, say).
        corpus: Candidate documents besides the gold documents; None: the gold documents only.
        num_negatives: Negatives per gold pair.
        range_min: Nearest documents skipped (some may be relevant but unjudged); the NV-Retriever paper's
            ``relative_margin=0.05`` is the other guard against such false negatives.
        range_max: Nearest documents considered; None: derived from ``num_negatives``.
        relative_margin: Skip a document scoring within this fraction of the positive's score.
        sampling: ``top``: the nearest that qualify; ``random``: a random choice among them.
        batch_size: Encoding batch size.
        seed: Seeds ``random`` sampling.
        max_seq_length: Tokens per text for the miner; None: the model's own.

    Returns:
        ``query``, ``positive``, ``negative``: one row per mined negative (fewer where too few qualified).

    Example:
        >>> mine_negatives(pairs, "models/zero_shot", corpus=corpus_texts, num_negatives=3)  # doctest: +SKIP
    """
    import random

    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    random.seed(seed)  # mine_hard_negatives samples with the random module
    dataset = Dataset(pairs.select(["query", "document"]).rename_columns(["query", "positive"]))
    miner_model = SentenceTransformer(miner)
    if max_seq_length:  # tokens per text: the model's own (256 for MiniLM) costs twice 128's on a long corpus
        miner_model.max_seq_length = max_seq_length
    mined = mine_hard_negatives(
        dataset, miner_model, anchor_column_name="query", positive_column_name="positive", corpus=corpus,
        range_min=range_min, range_max=range_max, relative_margin=relative_margin, num_negatives=num_negatives,
        sampling_strategy=sampling, include_positives=False, output_format="triplet", batch_size=batch_size, verbose=False,
    )
    if len(mined) == 0:
        raise ValueError(f"mining found no negatives for {pairs.num_rows} gold pairs: give a corpus, or lower range_min")
    return mined.data.table.select(["query", "positive", "negative"]).combine_chunks()


def reranker_pairs(pairs: pa.Table, triplets: pa.Table) -> pa.Table:
    """Labeled pairs for a re-ranker: each gold pair with label 1, each distinct (query, mined negative) with 0.

    Args:
        pairs: ``query``, ``document``: the gold pairs.
        triplets: ``query``, ``positive``, ``negative`` from ``mine_negatives``.

    Returns:
        ``query``, ``document``, ``label`` (float32), positives first.
    """
    positives = pairs.select(["query", "document"]).group_by(["query", "document"], use_threads=False).aggregate([])
    # a query's negatives repeat once per positive of that query: one row each
    negatives = triplets.select(["query", "negative"]).group_by(["query", "negative"], use_threads=False).aggregate([])
    negatives = negatives.rename_columns(["query", "document"])
    return pa.concat_tables([
        positives.append_column("label", pa.array([1.0] * positives.num_rows, pa.float32())),
        negatives.append_column("label", pa.array([0.0] * negatives.num_rows, pa.float32())),
    ])


def prepare_gold_files(pairs: pa.Table, miner: str, out_dir: Path, corpus: list[str] | None = None, **mining: Any) -> MinedGold:
    """Mine negatives for the gold pairs (on this process, see the module's note) and write the re-ranker's labeled
    pairs and the gold triplets (for ``fit_gold_baseline`` and ``fit_knrm``) into ``out_dir``.

    Args:
        pairs: ``query``, ``document``: every relevant pair (``relevant_pairs``).
        miner: The bi-encoder that finds the negatives.
        out_dir: Gets ``reranker.parquet`` and ``triplets.parquet``.
        corpus: Candidate documents besides the gold ones.
        **mining: More arguments of ``mine_negatives`` (num_negatives, range_min, relative_margin, ...).

    Returns:
        The two files and their counts.

    Example:
        ::

            mined = prepare_gold_files(relevant_pairs(queries, corpus, qrels), resolve_model("minilm"), Path("gold"),
                                       corpus=corpus.column("text").to_pylist(), num_negatives=4)
            fit_reranker(EncoderSpec(model="mpnet"), resolve_model("mpnet"), mined.reranker_file, TrainingSpec(),
                         seed=42, storage=Path("ray_train"), model_dir=Path("models/reranker"))
    """
    triplets = mine_negatives(pairs, miner, corpus, **mining)
    labeled = reranker_pairs(pairs, triplets)
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(labeled, out_dir / "reranker.parquet")
    pq.write_table(triplets, out_dir / "triplets.parquet")
    positives = int(pc.sum(labeled.column("label")).as_py())
    return MinedGold(out_dir / "reranker.parquet", out_dir / "triplets.parquet", positives, labeled.num_rows - positives)


def encoder_fields(spec: EncoderSpec) -> dict[str, Any]:
    """The EncoderSpec part of a spec (a CrossEncoderSpec or BiEncoderSpec too), as the workers validate it."""
    return spec.model_dump(mode="json", include=set(EncoderSpec.model_fields))


def read_columns(path: str, columns: list[str]) -> pa.Table:
    """Those columns of one training file, or a ValueError naming the file and what it lacks."""
    names = pq.read_schema(path).names
    if missing := [column for column in columns if column not in names]:
        raise ValueError(f"{path}: no column(s) {missing} (has {names})")
    return pq.read_table(path, columns=columns)


def require_steps(metrics: dict[str, Any], name: str, train_file: Path, model_dir: Path) -> dict[str, Any]:
    """A fit's metrics, or a RuntimeError where it took no step (its untrained model removed from ``model_dir``): the
    trainer drops a last partial batch under Ray Train, and MNRL's no-duplicates sampler yields no batch where the
    same texts fill the rows; either would pass the untrained model on as trained."""
    if not metrics.get("steps") and not metrics.get("reused"):
        shutil.rmtree(model_dir, ignore_errors=True)
        raise RuntimeError(f"training {name} took no step on {train_file} ({metrics.get('train_rows')} rows): "
                           "lower the batch size, or give more (and more varied) rows")
    return metrics


def reranker_train_loop(config: dict[str, Any]) -> None:
    worker_setup(config)
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    spec = EncoderSpec.model_validate(config["spec"])
    [(path, _)] = config["train_files"]
    table = read_columns(path, ["query", "document", "label"])
    table = table.set_column(2, "label", table.column("label").cast(pa.float32()))
    positives = max(1.0, float(pc.sum(table.column("label")).as_py()))
    model = CrossEncoder(config["model"], num_labels=1, max_length=spec.max_seq_length)
    # BCE on (query, document, 0/1), with the positives weighted by the negatives per positive, as the library's
    # reranker example does: otherwise the many negatives teach it to call every document irrelevant
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor((table.num_rows - positives) / positives))
    train_and_report(CrossEncoderTrainer, CrossEncoderTrainingArguments, model, loss, table, spec, config, False)


def fit_reranker(
    spec: EncoderSpec,
    model: str,
    train_file: Path,
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    model_dir: Path,
    name: str = "reranker",
) -> dict[str, Any]:
    """Fine-tune a cross-encoder re-ranker (fresh one-logit head, BCE with the positives weighted up) on labeled
    (query, document) pairs on Ray Train, and save it into ``model_dir``. The query always comes first: a re-ranker
    is not symmetric, so ``CrossEncoderSpec.both_orders`` is not applied.

    Args:
        spec: Epochs, batch size, learning rate, warm-up, max sequence length (a CrossEncoderSpec does too).
        model: The base model's directory or Hugging Face id.
        train_file: ``reranker_file`` of ``prepare_gold_files``: ``query``, ``document``, ``label`` (1/0).
        resources: Ray Train's workers, CPUs, GPU use, bf16 and checkpoint interval.
        seed: Seeds the head and the data order.
        storage: Ray Train's storage; a fit stopped midway resumes from its last checkpoint there.
        model_dir: Where the trained CrossEncoder is saved.
        name: The fit's name in ``storage`` and in logs.

    Returns:
        ``train_loss``, ``train_rows``, ``steps``, ``train_seconds`` and ``resumed_from_step``.

    Example:
        ::

            fit_reranker(EncoderSpec(epochs=2), resolve_model("minilm"), Path("gold/reranker.parquet"), TrainingSpec(),
                         seed=42, storage=Path("ray_train"), model_dir=Path("models/reranker"))
    """
    config = {"spec": encoder_fields(spec), "model": model, "train_files": [(str(train_file), "label")], "seed": seed}
    return require_steps(fit_on_ray(reranker_train_loop, config, resources, storage, name, model_dir), name, train_file, model_dir)

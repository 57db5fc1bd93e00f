"""The retrieval fits (issue 58) on a tiny BERT: re-ranker on mined negatives, distilled students, gold-only SBERT, KNRM.

The data: 30 ArguAna points by distant supervision (a point's conclusion is the query, its premise the relevant
document), their counterarguments as distractors, one query with two relevant documents, and one query whose text is
its relevant document (the nearest document by any encoder, so mining must leave it out on purpose).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.config import EncoderSpec, TrainingSpec
from augsbert_ray.training.distillation import student_columns
from augsbert_ray.training.retrieval import (
    KNRM,
    MinedGold,
    distillation_rows,
    fit_distilled_student,
    fit_gold_baseline,
    fit_knrm,
    fit_reranker,
    pairwise_loss,
    prepare_gold_files,
    relevant_pairs,
    student_loss,
)

QUERIES = 30
RESOURCES = TrainingSpec(num_workers=0, cpus_per_worker=1)  # in this process: the losses, not Ray Train, are tested here


def tiny_spec(tiny_model: Path, epochs: int = 2) -> EncoderSpec:
    return EncoderSpec(model=str(tiny_model), epochs=epochs, batch_size=16, learning_rate=1e-3, max_seq_length=64)


@pytest.fixture(scope="module")
def retrieval_data(data_dir: Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    """queries, corpus and qrels in the retrieval layout."""
    points = sorted((data_dir / "arguana" / "training").glob("*/*/pro/pro01a-point.txt"))[:QUERIES]
    queries, docs, qrels = [], [], []
    for i, point in enumerate(points):
        conclusion, _, premise = point.read_text(encoding="utf-8").partition("\n")
        queries.append((f"q{i}", conclusion.strip()))
        docs.append((f"p{i}", premise.strip()[:300]))
        qrels.append((f"q{i}", f"p{i}", 1))
        counter = point.with_name("pro01b-counter.txt")
        if counter.is_file():
            docs.append((f"c{i}", counter.read_text(encoding="utf-8").strip()[:300]))
    qrels.append(("q0", "c0", 1))  # a second relevant document
    queries.append(("echo", docs[5][1]))
    qrels += [("echo", docs[5][0], 1), ("q1", "c1", 0)]  # the query is its document; a judged-irrelevant qrel
    as_table = lambda rows, names: pa.table(dict(zip(names, map(list, zip(*rows)))))
    return as_table(queries, ["query_id", "text"]), as_table(docs, ["doc_id", "text"]), as_table(qrels, ["query_id", "doc_id", "relevance"])


@pytest.fixture(scope="module")
def gold_pairs(retrieval_data: tuple[pa.Table, pa.Table, pa.Table]) -> pa.Table:
    return relevant_pairs(*retrieval_data)


@pytest.fixture(scope="module")
def mined(gold_pairs: pa.Table, retrieval_data: tuple[pa.Table, pa.Table, pa.Table], tiny_model: Path,
          tmp_path_factory: pytest.TempPathFactory) -> MinedGold:
    corpus = retrieval_data[1].column("text").to_pylist()
    return prepare_gold_files(gold_pairs, str(tiny_model), tmp_path_factory.mktemp("gold"), corpus=corpus, num_negatives=3,
                              # a random tiny BERT makes a few documents everyone's nearest: sample from 15 for variety
                              sampling="random", range_max=15)


def gold_by_query(pairs: pa.Table) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = {}
    for query, document in zip(pairs.column("query").to_pylist(), pairs.column("document").to_pylist()):
        relevant.setdefault(query, set()).add(document)
    return relevant


def test_relevant_pairs_keep_the_judged_relevant_qrels(gold_pairs: pa.Table) -> None:
    assert gold_pairs.num_rows == QUERIES + 2  # one each, q0's second, the echo query's; q1's relevance-0 qrel is out
    assert gold_pairs.column_names == ["query_id", "query", "doc_id", "document"]
    assert set(gold_pairs.filter(pa.compute.equal(gold_pairs.column("query_id"), "q0")).column("doc_id").to_pylist()) == {"p0", "c0"}


def test_mined_negatives_exclude_every_gold_document_of_their_query(
    mined: MinedGold, gold_pairs: pa.Table, retrieval_data: tuple[pa.Table, pa.Table, pa.Table], tiny_model: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    relevant = gold_by_query(gold_pairs)
    labeled = pq.read_table(mined.reranker_file)
    assert labeled.column_names == ["query", "document", "label"]
    assert mined.positives == gold_pairs.num_rows and mined.negatives > QUERIES
    for query, document, label in zip(*(labeled.column(name).to_pylist() for name in labeled.column_names)):
        assert (document in relevant[query]) == (label == 1.0), (query, document)
    triplets = pq.read_table(mined.triplet_file)
    for query, positive, negative in zip(*(triplets.column(name).to_pylist() for name in ["query", "positive", "negative"])):
        assert positive in relevant[query] and negative not in relevant[query]
    # the echo query's own document is the nearest of all: mining had to skip it, and found others
    echo = gold_pairs.filter(pa.compute.equal(gold_pairs.column("query_id"), "echo")).column("query")[0].as_py()
    encoder = SentenceTransformer(str(tiny_model))
    corpus = retrieval_data[1].column("text").to_pylist()
    nearest = corpus[int(encoder.similarity(encoder.encode([echo]), encoder.encode(corpus)).argmax())]
    assert nearest == echo and echo in relevant[echo]
    assert 0 < sum(query == echo for query in triplets.column("query").to_pylist())


def reranker_logits(model: Any, table: pa.Table) -> np.ndarray:
    import torch

    pairs = list(zip(table.column("query").to_pylist(), table.column("document").to_pylist()))
    return model.predict(pairs, activation_fn=torch.nn.Identity())


def reranker_loss(logits: np.ndarray, table: pa.Table) -> float:
    """The fit's loss on the rows: BCE with the positives weighted by the negatives per positive."""
    import torch

    labels = torch.tensor(table.column("label").to_pylist())
    weight = (len(labels) - labels.sum()) / labels.sum()
    return float(torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(logits), labels, pos_weight=weight))


@pytest.mark.slow
def test_reranker_fit_on_mined_negatives_learns_to_rank_gold_first(ray_session, mined: MinedGold, tiny_model: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder
    from transformers import set_seed

    # a random one-layer BERT needs a high rate and many epochs (of a few steps each) to separate the pairs
    spec = tiny_spec(tiny_model, epochs=10).model_copy(update={"learning_rate": 5e-3})
    metrics = fit_reranker(spec, str(tiny_model), mined.reranker_file, RESOURCES, 0, tmp_path / "ray_train", tmp_path / "reranker")
    table = pq.read_table(mined.reranker_file)
    assert metrics["train_rows"] == table.num_rows and metrics["steps"] > 0
    gold = np.array(table.column("label").to_pylist()) == 1
    trained = reranker_logits(CrossEncoder(str(tmp_path / "reranker"), max_length=64), table)
    set_seed(0)  # as the fit's worker does before it adds the head: the same start
    untrained = reranker_logits(CrossEncoder(str(tiny_model), num_labels=1, max_length=64), table)
    assert trained[gold].mean() - trained[~gold].mean() > 0.1 > abs(untrained[gold].mean() - untrained[~gold].mean())
    assert reranker_loss(trained, table) < reranker_loss(untrained, table)


def teacher_candidates(retrieval_data: tuple[pa.Table, pa.Table, pa.Table], per_query: int = 6) -> pa.Table:
    """Each query's relevant premise and the next documents, scored by a made-up teacher: word overlap, +2 if relevant."""
    queries, corpus, _ = retrieval_data
    docs = list(zip(corpus.column("doc_id").to_pylist(), corpus.column("text").to_pylist()))
    rows = []
    for i, (query_id, query) in enumerate(zip(queries.column("query_id").to_pylist()[:QUERIES], queries.column("text").to_pylist())):
        words = set(query.lower().split())
        start = next(k for k, (doc_id, _) in enumerate(docs) if doc_id == f"p{i}")
        for doc_id, doc in (docs * 2)[start:start + per_query]:
            overlap = len(words & set(doc.lower().split())) / len(words | set(doc.lower().split()))
            rows.append({"query_id": query_id, "query": query, "doc_id": doc_id, "doc": doc,
                         "score": 6 * overlap + (2.0 if doc_id == f"p{i}" else 0.0) - 1})
    return pa.Table.from_pylist(rows)


def test_distillation_rows_pick_positives_and_negatives_per_query(retrieval_data) -> None:
    candidates = teacher_candidates(retrieval_data)
    margins = distillation_rows(candidates, "margin_mse", num_negatives=3)
    assert margins.num_rows == 3 * QUERIES and min(margins.column("label").to_pylist()) >= 0  # the positive is the top one
    # rows depend on each query's candidates only, not on their order
    shuffled = candidates.take(np.random.default_rng(0).permutation(candidates.num_rows))
    assert distillation_rows(shuffled, "margin_mse", num_negatives=3).equals(margins)

    gold = pa.table({"query_id": ["q0", "q1", "q2"], "doc_id": ["p0", "c1", "x"]})  # q2's gold doc has no teacher score
    with_gold = distillation_rows(candidates, "margin_mse", num_negatives=3, gold=gold).to_pylist()
    assert {row["query_id"] for row in with_gold} == {f"q{i}" for i in range(QUERIES)} - {"q2"}
    documents = dict(zip(retrieval_data[1].column("doc_id").to_pylist(), retrieval_data[1].column("text").to_pylist()))
    assert {row["positive"] for row in with_gold if row["query_id"] == "q1"} == {documents["c1"]}  # not the top one
    # a query without gold keeps the teacher's top candidate
    assert [row for row in with_gold if row["query_id"] == "q3"] == [row for row in margins.to_pylist() if row["query_id"] == "q3"]

    listwise = distillation_rows(candidates, "kl", num_negatives=4, sampling="top")
    assert listwise.column_names == ["query_id", "query", "positive", *(f"negative_{i}" for i in range(1, 5)), "scores"]
    assert all(scores == sorted(scores, reverse=True) and len(scores) == 5 for scores in listwise.column("scores").to_pylist())
    with pytest.raises(ValueError, match="enough negatives"):
        distillation_rows(candidates, "kl", num_negatives=6)  # 6 candidates: one positive and 5 others


def rows_loss(model_dir: Path, table: pa.Table, loss: str) -> float:
    """A student loss of a saved model on all the rows at once, as the fit computes it on a batch."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir))
    model.max_seq_length = 64
    columns = student_columns(table.column_names, loss)
    texts, label = (columns, None) if loss == "mnrl" else (columns[:-1], columns[-1])
    with torch.no_grad():
        embeddings = [model.encode(table.column(name).to_pylist(), convert_to_tensor=True) for name in texts]
        labels = torch.tensor(table.column(label).to_pylist()) if label else None
        return float(student_loss(model, loss).compute_loss_from_embeddings(embeddings, labels))


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["margin_mse", "kl"])
def test_a_distilled_student_lowers_its_loss(loss: str, ray_session, retrieval_data, tiny_model: Path, tmp_path: Path) -> None:
    rows = distillation_rows(teacher_candidates(retrieval_data), loss, num_negatives=4)
    pq.write_table(rows, tmp_path / "rows.parquet")
    metrics = fit_distilled_student(tiny_spec(tiny_model, epochs=6), str(tiny_model), tmp_path / "rows.parquet", loss, RESOURCES, 0,
                                    tmp_path / "ray_train", tmp_path / "student")
    assert metrics["train_rows"] == rows.num_rows
    assert rows_loss(tmp_path / "student", rows, loss) < 0.8 * rows_loss(tiny_model, rows, loss)


@pytest.mark.slow
def test_the_gold_only_baseline_fits_with_mnrl(ray_session, mined: MinedGold, tiny_model: Path, tmp_path: Path) -> None:
    triplets = pq.read_table(mined.triplet_file)
    # MNRL's batches hold no text twice: small ones, from 96 rows with repeated queries and negatives
    spec = tiny_spec(tiny_model, epochs=4).model_copy(update={"batch_size": 8})
    metrics = fit_gold_baseline(spec, str(tiny_model), mined.triplet_file, RESOURCES, 0, tmp_path / "ray_train",
                                tmp_path / "gold_sbert")
    assert metrics["train_rows"] == triplets.num_rows
    assert rows_loss(tmp_path / "gold_sbert", triplets, "mnrl") < rows_loss(tiny_model, triplets, "mnrl")


def test_a_fit_that_took_no_step_is_an_error_and_leaves_no_model(tmp_path: Path) -> None:
    from augsbert_ray.training.reranker import require_steps

    (tmp_path / "model").mkdir()
    with pytest.raises(RuntimeError, match="took no step.*lower the batch size"):
        require_steps({"steps": 0, "train_rows": 5}, "gold_sbert", tmp_path / "rows.parquet", tmp_path / "model")
    assert not (tmp_path / "model").exists()
    assert require_steps({"steps": 3}, "gold_sbert", tmp_path / "rows.parquet", tmp_path / "model") == {"steps": 3}


def knrm_loss(knrm: KNRM, triplets: pa.Table) -> float:
    import torch

    queries = triplets.column("query").to_pylist()
    positive = knrm.score(queries, triplets.column("positive").to_pylist())
    negative = knrm.score(queries, triplets.column("negative").to_pylist())
    return float(pairwise_loss(torch.from_numpy(positive), torch.from_numpy(negative), "hinge"))


@pytest.mark.slow
def test_knrm_trains_and_reloads_with_identical_scores(ray_session, mined: MinedGold, tiny_model: Path, tmp_path: Path) -> None:
    import torch

    metrics = fit_knrm(tiny_spec(tiny_model, epochs=3), str(tiny_model), mined.triplet_file, RESOURCES, 0, tmp_path / "ray_train",
                       tmp_path / "knrm")
    assert metrics["epoch_losses"][-1] < metrics["epoch_losses"][0]
    triplets = pq.read_table(mined.triplet_file)
    trained = KNRM.from_pretrained(tmp_path / "knrm")
    torch.manual_seed(0)
    assert knrm_loss(trained, triplets) < knrm_loss(KNRM.from_encoder(str(tiny_model), 64).eval(), triplets)

    queries, docs = triplets.column("query").to_pylist()[:20], triplets.column("negative").to_pylist()[:20]
    trained.save_pretrained(tmp_path / "again")
    np.testing.assert_array_equal(KNRM.from_pretrained(tmp_path / "again").score(queries, docs), trained.score(queries, docs))
    assert trained.max_length == 64 and len(trained.mus) == 11

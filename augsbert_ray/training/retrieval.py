"""Fits for the retrieval scenario (issue 58): a cross-encoder re-ranker teacher trained on gold pairs with mined hard
negatives, a bi-encoder student distilled from its scores (MarginMSE or listwise KL), the gold-only SBERT baseline
(MNRL) and KNRM over the student's token embeddings, each a train loop run on Ray Train from Parquet rows.

The flow, with the files between the steps::

    pairs = relevant_pairs(queries, corpus, qrels)                 # query_id, query, doc_id, document
    mined = prepare_gold_files(pairs, miner, Path("gold"), corpus=texts)
    fit_reranker(spec, base, mined.reranker_file, ...)             # query, document, label
    fit_gold_baseline(spec, student, mined.triplet_file, ...)      # query, positive, negative
    fit_knrm(spec, student, mined.triplet_file, ...)
    # the re-ranker scores BM25/dense candidates (labeling), giving query_id, query, doc_id, doc, score
    pq.write_table(distillation_rows(candidates, "margin_mse"), "margins.parquet")
    fit_distilled_student(spec, student, Path("margins.parquet"), "margin_mse", ...)
"""

from augsbert_ray.training.distillation import (
    DistillationLoss,
    distillation_rows,
    fit_distilled_student,
    fit_gold_baseline,
    query_rows,
    student_loss,
)
from augsbert_ray.training.knrm import KERNEL_MUS, KERNEL_SIGMAS, KNRM, fit_knrm, pairwise_loss
from augsbert_ray.training.reranker import MinedGold, fit_reranker, mine_negatives, prepare_gold_files, relevant_pairs, reranker_pairs

__all__ = [
    "KERNEL_MUS", "KERNEL_SIGMAS", "KNRM", "DistillationLoss", "MinedGold", "distillation_rows", "fit_distilled_student",
    "fit_gold_baseline", "fit_knrm", "fit_reranker", "mine_negatives", "pairwise_loss", "prepare_gold_files", "query_rows",
    "relevant_pairs", "reranker_pairs", "student_loss",
]

"""scenario: retrieval end to end on a tiny BERT (issue 58): the job spec's retrieval section and its errors, a tiny
run of jobs/arguana_premise.yaml through Ray Train and the labeling engine, and its resume after a kill while
labeling."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from augsbert_ray.cli import main
from augsbert_ray.config import SpecError, load_spec
from augsbert_ray.pipeline.retrieval import interleaved
from augsbert_ray.sampling.queries import bm25_search, dense_search, hits_by_query

JOB = "jobs/arguana_premise.yaml"
ROWS = {"bm25", "zero_shot", "sbert", "augsbert_margin_mse", "teacher_rerank", "knrm", "aggregation", "rrf"}
METRICS = ("ndcg@10", "mrr@10", "map@100", "recall@100")
GOLD, UNLABELED, PER_QUERY, EVAL = 40, 60, 5, 30


def tiny_settings(tiny_model: Path, output_dir: Path, name: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The premise job on the tiny BERT: 40 gold queries, 60 unlabeled with 5 candidates each (10-pair shards), 30
    dev and 30 test queries, BM25's top 20 re-ranked; fits on one thread in the run's own process (Ray Train's local
    mode: no worker to start; the fits on a worker are the in-domain kill test's and the fault-tolerance tests')."""
    settings = [
        f"cross_encoder.model={tiny_model}", f"bi_encoder.model={tiny_model}", f"evaluation.zero_shot_model={tiny_model}",
        f"output_dir={output_dir}", f"name={name}", f"retrieval.train_queries={GOLD}", f"retrieval.unlabeled_queries={UNLABELED}",
        f"retrieval.candidates_per_query={PER_QUERY}", f"retrieval.eval_queries={EVAL}", "retrieval.rerank_depth=20",
        "retrieval.hard_negatives=2", "retrieval.student_negatives=2", "cross_encoder.epochs=1", "cross_encoder.max_seq_length=64",
        "bi_encoder.max_seq_length=64", "bi_encoder.batch_size=8", "labeling.shard_rows=10", "training.num_workers=0", "training.cpus_per_worker=1", *extra,
    ]
    return [item for setting in settings for item in ("--set", setting)]


@pytest.mark.parametrize(("overrides", "field"), [
    (["scenario=retrieval"], "needs a 'retrieval' section"),
    (["retrieval.task=premise"], "'retrieval' is for scenario: retrieval"),
    (["scenario=retrieval", "retrieval.task=claims"], "retrieval.task"),
    (["scenario=retrieval", "retrieval.candidates=magic"], "retrieval.candidates"),
    (["scenario=retrieval", "retrieval.student_loss=mse"], "retrieval.student_loss"),
    (["scenario=retrieval", "retrieval.train_queries=0"], "retrieval.train_queries"),
    (["scenario=retrieval", "retrieval.rerank_depth=500"], "rerank_depth (500) exceeds depth (100)"),
    (["scenario=retrieval", "retrieval.unlabeled=everything"], "retrieval.unlabeled"),
    (["scenario=retrieval", "retrieval.source=beir"], "source: beir needs 'path'"),
    (["scenario=retrieval", "retrieval.source=files"], "source: files needs 'files'"),
    (["scenario=retrieval", "retrieval.student_loss=kl", "retrieval.student_negatives=20"], "student_negatives (20)"),
    (["scenario=retrieval", "retrieval.task=premise", "teacher.kind=ensemble"], "teacher.kind ensemble"),
    (["scenario=retrieval", "retrieval.task=premise", "tuning.seeds=2"], "tuning runs in the in-domain scenario only"),
])
def test_a_bad_retrieval_section_is_one_line_naming_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(None, overrides)
    named = [line for line in str(caught.value).splitlines()[1:] if field in line]
    assert len(named) == 1, str(caught.value)


def test_the_jobs_load_and_other_scenarios_keep_their_spec() -> None:
    for task in ("premise", "counter"):
        spec = load_spec(f"jobs/arguana_{task}.yaml")
        assert spec.scenario == "retrieval" and spec.retrieval is not None and spec.retrieval.task == task
        assert spec.retrieval.train_queries == 300 and spec.retrieval.student_loss == "margin_mse"
    assert load_spec("jobs/stsb_indomain_bm25.yaml").retrieval is None


def test_search_helpers_rank_and_leave_out_excluded_documents() -> None:
    corpus = ["the cat sat on the mat", "dogs bark at night", "a cat and a dog", "zebra stripes"]
    rows, scores = bm25_search(corpus, ["cat mat", "unicorn"], 3)
    run = hits_by_query(rows, scores, ["q1", "q2"], ["a", "b", "c", "d"], {"q1": {"c"}}, 3, positive_only=True)
    assert list(run["q1"]) == ["a"] and run["q2"] == {}  # c excluded, no other doc shares a term; nothing for unicorn
    vectors = np.eye(4, dtype=np.float32)
    rows, _ = dense_search(vectors, vectors[[3, 0]], 2)
    assert rows[:, 0].tolist() == [3, 0]
    taken = interleaved([{"a": 3.0, "b": 2.0, "c": 1.0}, {"b": 0.9, "d": 0.8, "e": 0.1}], 4)
    assert [(doc, source) for doc, source, _ in taken] == [("a", 0), ("b", 1), ("d", 1), ("c", 0)]


def write_split(folder: Path, prefix: str, queries: int) -> dict[str, str]:
    """A tiny split in files: doc d<i> answers query q<i>; ids carry ``prefix``."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = [{"_id": f"{prefix}d{i}", "text": f"document {i} about topic{i} and more"} for i in range(queries + 5)]
    asked = [{"_id": f"{prefix}q{i}", "text": f"what about topic{i}"} for i in range(queries)]
    for name, rows in (("corpus", docs), ("queries", asked)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    lines = ["query-id\tcorpus-id\tscore", *(f"{prefix}q{i}\t{prefix}d{i}\t1" for i in range(queries)), f"{prefix}q0\tnowhere\t1"]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return {name: str(folder / file) for name, file in (("corpus", "corpus.jsonl"), ("queries", "queries.jsonl"), ("qrels", "qrels.tsv"))}


def test_files_give_gold_unlabeled_and_dev_test_halves_sharing_the_corpus(tmp_path: Path) -> None:
    from augsbert_ray.pipeline.context import RunContext
    from augsbert_ray.pipeline.retrieval_data import read_retrieval

    train, test = write_split(tmp_path / "train", "t", 30), write_split(tmp_path / "test", "e", 20)
    spec = load_spec(None, ["scenario=retrieval", "retrieval.source=files", "retrieval.train_queries=10", "retrieval.unlabeled_queries=15",
                            *(f"retrieval.files.train.{k}={v}" for k, v in train.items()), *(f"retrieval.files.test.{k}={v}" for k, v in test.items())])
    data = read_retrieval(RunContext.open(spec, tmp_path / "run"))
    counts = data.counts
    assert counts["gold"] == {"queries": 10, "pairs": 10} and counts["unlabeled"]["queries"] == 15
    assert set(data.gold.queries.ids).isdisjoint(data.unlabeled.queries.ids) and len(data.unlabeled.qrels) == 0
    assert counts["queries"]["dev"] + counts["queries"]["test"] == 20 and counts["queries"]["dev"] == 10  # halves of the queries
    assert data.dev.corpus == data.test.corpus and len(data.test.corpus) == 25  # no groups: both rank the whole corpus
    assert counts["rejects"]["read"] == 2  # a qrels line naming an unknown doc, in each split
    assert len((tmp_path / "run" / "rejects.jsonl").read_text().splitlines()) == 2


def test_each_retrieval_step_takes_only_what_earlier_steps_make() -> None:
    import inspect

    from augsbert_ray.pipeline.scenarios import RETRIEVAL, scenario_steps
    from augsbert_ray.pipeline.steps import WALL_SECONDS

    assert scenario_steps(load_spec(JOB)) is RETRIEVAL
    made: set[str] = {WALL_SECONDS}
    for step in RETRIEVAL:
        wanted = list(inspect.signature(step.run).parameters)[1:]
        assert set(wanted) <= made, f"{step.names} takes {sorted(set(wanted) - made)}, made by no earlier step"
        made |= set(step.names)


@pytest.fixture(scope="module")
def tiny_retrieval_run(ray_session, tiny_model: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted tiny retrieval run in this session's Ray: its directory."""
    output_dir = tmp_path_factory.mktemp("retrieval_run")
    assert main(["run", JOB, "--data-dir", str(data_dir), *tiny_settings(tiny_model, output_dir, "tiny")]) == 0
    (run_dir,) = output_dir.glob("tiny-*")
    return run_dir


@pytest.mark.slow
def test_a_tiny_retrieval_run_ranks_with_every_model_and_counts_add_up(tiny_retrieval_run: Path) -> None:
    run_dir = tiny_retrieval_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    counts = metrics["counts"]
    assert metrics["scenario"] == "retrieval" and metrics["task"] == "premise" and metrics["metric"] == "ndcg@10"
    for split in ("dev", "test"):
        assert set(metrics[split]) == ROWS, split
        for row, values in metrics[split].items():
            assert all(0 <= values[name] <= 100 for name in METRICS), (split, row, values)
            assert values["queries"] == counts["queries"][split] == EVAL, (split, row)
    assert counts["gold"]["queries"] == counts["queries"]["gold"] == GOLD
    assert counts["unlabeled"]["queries"] == counts["queries"]["unlabeled"] == UNLABELED
    assert counts["candidates"] == UNLABELED * PER_QUERY == counts["labeled"] + counts["label_rejected"]
    assert counts["corpus"]["train"] == counts["read"]["train"]["documents"]
    assert counts["rejects"]["read"] == counts["read"]["train"]["query_rejects"] + counts["read"]["train"]["document_rejects"] + counts["read"]["test"]["query_rejects"] + counts["read"]["test"]["document_rejects"]
    trained = counts["trained_on"]
    mined = json.loads((run_dir / "retrieval" / "gold" / "mined.json").read_text())
    assert trained["reranker"] == mined["positives"] + mined["negatives"] and mined["positives"] == counts["gold"]["pairs"]
    assert trained["gold_sbert"] == trained["knrm"] == mined["triplets"]
    assert trained["augsbert_margin_mse"] == UNLABELED * 2  # a margin row per (query, negative)
    assert set(metrics["aggregation"]["fused"]) == {"bm25", "teacher_rerank", "augsbert_margin_mse", "knrm"}
    assert {"read retrieval data", "label (query, candidate) pairs with the teacher", "total"} <= set(metrics["wall_seconds"])

    silver = pq.read_table(run_dir / "silver" / "retrieval")
    assert {"query_id", "query", "doc_id", "doc", "source", "score", "labeler", "strategy"} <= set(silver.column_names)
    assert silver.num_rows == counts["labeled"] and silver.column("score").null_count == 0
    assert set(silver.column("labeler").to_pylist()) == {counts["labeler"]}
    assert set(silver.column("source").to_pylist()) <= {"bm25", "dense"}
    assert len(list((run_dir / "silver" / "retrieval").glob("part-*.parquet"))) == UNLABELED * PER_QUERY // 10

    from sentence_transformers import SentenceTransformer

    student = run_dir / "models" / "augsbert_margin_mse"
    assert (student / "config.json").is_file() and (student / "modules.json").is_file()
    assert SentenceTransformer(str(student)).encode(["a query"]).shape[0] == 1
    assert (run_dir / "models" / "knrm" / "knrm.json").is_file() and (run_dir / "models" / "reranker" / "config.json").is_file()
    report = (run_dir / "report.md").read_text()
    assert "| BM25 |" in report and "AugSBERT student (MarginMSE)" in report and "## Counts" in report
    assert main(["run", "--resume", str(run_dir)]) == 2  # finished


@pytest.mark.slow
def test_a_retrieval_run_killed_while_labeling_resumes_to_the_uninterrupted_result(
    tiny_retrieval_run: Path, tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    """`augsbert run` SIGKILLed with its process tree while it labels; `--resume` reuses the fits and the candidates,
    labels only the shards not yet written and ends with the uninterrupted run's metrics. The killed run takes the
    uninterrupted run's teacher (cross_encoder.trained), as the teacher's fit is not what is killed."""
    from tests.test_pipeline import kill_tree, start_augsbert, wait_until

    reference = json.loads((tiny_retrieval_run / "metrics.json").read_text())
    ray_tmpdir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # AF_UNIX socket paths must stay short
    settings = tiny_settings(tiny_model, tmp_path, "killed", (f"cross_encoder.trained={tiny_retrieval_run / 'models' / 'reranker'}",))
    first = start_augsbert(["run", JOB, "--data-dir", str(data_dir), *settings], tmp_path / "first.log", ray_tmpdir)
    wait_until(lambda: any(tmp_path.glob("killed-*/silver/retrieval/part-*.parquet")), first, tmp_path / "first.log")
    kill_tree(first)
    (run_dir,) = tmp_path.glob("killed-*")
    silver = run_dir / "silver" / "retrieval"
    planned = json.loads((silver / "_manifest.json").read_text())["shards"]
    assert 1 <= len(list(silver.glob("part-*.parquet"))) < len(planned), "the kill did not land while labeling"
    labeled_before = {path: path.stat().st_mtime_ns for path in silver.glob("part-*.parquet")}
    assert set(json.loads((run_dir / "progress.json").read_text())) == {"reranker", "gold_sbert"}

    second = start_augsbert(["run", "--resume", str(run_dir), "--data-dir", str(data_dir)], tmp_path / "second.log", ray_tmpdir)
    assert second.wait(timeout=1200) == 0, (tmp_path / "second.log").read_text()[-3000:]
    resumed = json.loads((run_dir / "metrics.json").read_text())
    assert set(resumed["reused_fits"]) == {"reranker", "gold_sbert"}
    assert {path: path.stat().st_mtime_ns for path in labeled_before} == labeled_before  # no shard labeled again
    for key in ("candidates", "labeled", "queries", "corpus", "gold", "trained_on"):
        assert resumed["counts"][key] == reference["counts"][key], key
    for split in ("dev", "test"):
        for row in ROWS:
            assert resumed[split][row]["ndcg@10"] == pytest.approx(reference[split][row]["ndcg@10"], abs=1e-6), (split, row)

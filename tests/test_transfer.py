"""Domain transfer end to end on a tiny model, silver labels reaching the loss, and the paper's splits."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.cli import main
from augsbert_ray.config import BiEncoderSpec, CrossEncoderSpec, DataSpec, SpecError, TrainingSpec, load_spec
from augsbert_ray.data import load_gold
from augsbert_ray.data.splits import BWS_CROSS_TOPIC
from augsbert_ray.labeling import Teacher
from augsbert_ray.sampling import given_pairs


def pair_set(table: pa.Table) -> set[frozenset[str]]:
    return {frozenset(pair) for pair in zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist())}


def test_given_pairs_drop_repeats_self_pairs_and_held_out_pairs_and_count_them() -> None:
    train = pa.table({"sentence1": ["a", "b", "a", "c", "d", "e"], "sentence2": ["b", "a", "a", "d", "e", "f"]})
    test = pa.table({"sentence1": ["e"], "sentence2": ["d"]})
    candidates, counts = given_pairs(train, [test])
    assert pair_set(candidates) == {frozenset("ab"), frozenset("cd"), frozenset("ef")}
    assert counts == {"pairs_in": 6, "candidates": 3, "self_pairs": 1, "duplicates": 1, "held_out": 1}
    assert counts["pairs_in"] == sum(counts[key] for key in ("candidates", "self_pairs", "duplicates", "held_out"))
    assert set(candidates.column("strategy").to_pylist()) == {"given"}


def test_transfer_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="domain-transfer needs a 'target' section"):
        load_spec(None, ["scenario=domain-transfer"])
    with pytest.raises(SpecError, match="'target' is for scenario: domain-transfer"):
        load_spec(None, ["target.candidates=pairs"])
    with pytest.raises(SpecError, match="kde matches the gold score distribution"):
        load_spec(None, ["scenario=domain-transfer", "target.candidates=sentences", "sampling.strategies=[kde]"])
    with pytest.raises(SpecError, match="tuning runs in the in-domain scenario only"):
        load_spec(None, ["scenario=domain-transfer", "target.candidates=pairs", "tuning.seeds=2"])
    test_file = tmp_path / "test.csv"
    test_file.write_text("sentence1,sentence2,label\na,b,1\n")
    with pytest.raises(SpecError, match="target needs unlabeled text"):
        load_spec(None, ["scenario=domain-transfer", f"target.data={{dataset: null, test: {{path: {test_file}}}, dev: {{path: {test_file}}}}}"])


def test_bws_splits_are_disjoint_and_follow_the_topics(data_dir: Path) -> None:
    cross = load_gold(DataSpec(dataset="bws"), seed=3, data_dir=data_dir)
    for split, topics in BWS_CROSS_TOPIC.items():
        assert set(cross.split(split).column("topic").to_pylist()) == set(topics)
    in_topic = load_gold(DataSpec(dataset="bws", bws_split="in-topic"), seed=3, data_dir=data_dir)
    splits = [pair_set(in_topic.split(name)) for name in ("train", "dev", "test")]
    assert sum(len(s) for s in splits) == len(set.union(*splits))  # no pair in two splits
    for name in ("train", "dev", "test"):
        assert len(set(in_topic.split(name).column("topic").to_pylist())) == 8


def test_mrpc_dev_is_carved_from_train_not_test(data_dir: Path) -> None:
    mrpc = load_gold(DataSpec(dataset="mrpc"), seed=0, data_dir=data_dir)
    full_train = load_gold(DataSpec(dataset="mrpc", dev_fraction=0.5), seed=0, data_dir=data_dir)
    train_pairs = pair_set(full_train.train) | pair_set(full_train.dev)
    assert pair_set(mrpc.dev) <= train_pairs and pair_set(mrpc.train) <= train_pairs
    assert mrpc.test.num_rows == 1725 and not pair_set(mrpc.dev) & pair_set(mrpc.train)


# every fit in the test's process (Ray Train's local mode): a worker's start-up costs half a minute. Fits on Ray
# Train's workers are tested in test_pipeline, test_fault_tolerance and test_edges.
IN_PROCESS = ["training.num_workers=0", "training.cpus_per_worker=1"]
FIT_HERE = TrainingSpec(num_workers=0, cpus_per_worker=1)


def tiny_models(tiny_model: Path) -> list[str]:
    return [f"cross_encoder.model={tiny_model}", f"bi_encoder.model={tiny_model}", f"evaluation.zero_shot_model={tiny_model}",
            "cross_encoder.epochs=1", "data.train_limit=150", *IN_PROCESS]


def run(job: str, overrides: list[str], data_dir: Path) -> None:
    args = ["run", job, "--data-dir", str(data_dir)]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 0


@pytest.mark.slow
def test_transfer_stsb_to_mrpc_on_given_pairs(ray_session, tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    run("jobs/transfer_stsb_mrpc.yaml", [*tiny_models(tiny_model), "target.data.train_limit=300", f"output_dir={tmp_path}", "name=t"], data_dir)
    (run_dir,) = tmp_path.glob("t-*")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    models = {"cross_encoder", "sbert_source", "sbert_target", "augsbert", "zero_shot", "jaccard"}
    assert metrics["task"] == "classification" and metrics["metric"] == "f1_x100"
    assert set(metrics["test"]) == {*models, "majority"}
    assert all("test_auc05" in metrics["details"][name] and "threshold" in metrics["details"][name] for name in models)
    # every pair a paraphrase, dev's majority: 1,147 of MRPC's 1,725 test pairs are
    assert metrics["test"]["majority"] == pytest.approx(100 * 2 * 1147 / (2 * 1147 + 1725 - 1147))
    counts = metrics["counts"]
    given = counts["given_pairs"]
    assert given["pairs_in"] == counts["target_train"] == 300
    assert given["pairs_in"] == given["candidates"] + given["self_pairs"] + given["duplicates"] + given["held_out"]
    assert counts["candidates"]["given"] == counts["labeled"]["given"] == given["candidates"]
    assert counts["trained_on"]["augsbert"] == given["candidates"]  # silver alone, no gold
    assert counts["trained_on"]["sbert_source"] == counts["gold_train"] == 150
    silver = pq.read_table(run_dir / "silver" / "given")
    assert silver.num_rows == given["candidates"] and silver.column("score").null_count == 0
    held_out = pair_set(pq.read_table(run_dir / "target" / "test.parquet")) | pair_set(pq.read_table(run_dir / "target" / "dev.parquet"))
    assert not pair_set(silver) & held_out, "a target dev/test pair was labeled for training"
    # STSb's train holds 498 MRPC test pairs (its MSRpar part): the source's fits must not see them, labels and all
    assert counts["gold_overlap"]["target_test"] == 498 and not pair_set(pq.read_table(run_dir / "gold" / "train.parquet")) & held_out
    assert pair_set(silver) <= pair_set(pq.read_table(run_dir / "target" / "train.parquet"))
    for name in ("cross_encoder", "sbert_source", "sbert_target", "augsbert"):
        assert (run_dir / "models" / name / "model.safetensors").is_file(), name
    report = (run_dir / "report.md").read_text()
    assert "domain transfer from stsb to mrpc" in report and "AugSBERT minus SBERT-source" in report


@pytest.mark.slow
def test_transfer_from_target_sentences_alone(
    ray_session, tiny_model: Path, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path
) -> None:
    """No target train split at all: unlabeled sentences, recombined by BM25, plus labeled dev/test files. The
    teacher is given (cross_encoder.trained): the test above fits one on the source domain. The bi-encoder teacher
    model is fitted on the source and scored beside it (evaluation.teacher_bi_encoder), not made part of it."""
    bws = load_gold(DataSpec(dataset="bws", bws_split="in-topic"), seed=0, data_dir=data_dir)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(sorted(set(bws.train.column("sentence1").to_pylist()))[:120]) + "\n")
    files = {}
    for split in ("dev", "test"):
        files[split] = tmp_path / f"{split}.parquet"
        pq.write_table(bws.split(split).slice(0, 60), files[split])
    target = f"{{dataset: null, dev: {{path: {files['dev']}}}, test: {{path: {files['test']}}}}}"
    overrides = [*tiny_models(tiny_model), "scenario=domain-transfer", "data.dataset=stsb", f"target.data={target}",
                 "target.candidates=sentences", f"target.sentences={sentences}", "sampling.strategies=[bm25]",
                 f"cross_encoder.trained={tiny_cross_encoder}", "evaluation.teacher_bi_encoder=true",
                 f"teacher.bi_encoder.model={tiny_model}", "teacher.bi_encoder.epochs=1", f"output_dir={tmp_path}", "name=s"]
    run("jobs/stsb_indomain_bm25.yaml", overrides, data_dir)
    (run_dir,) = tmp_path.glob("s-*")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["test"]) == {"cross_encoder", "teacher_bi_encoder", "sbert_source", "augsbert_bm25", "zero_shot", "jaccard"}
    (member,) = Teacher.load(run_dir / "models" / "teacher.json").members  # scored, not made part of the teacher
    assert member.kind == "cross_encoder" and metrics["teacher"]["kind"] == "cross-encoder"
    counts = metrics["counts"]
    assert counts["trained_on"]["teacher_bi_encoder"] == counts["gold_train"] == 150  # fitted on the source gold
    assert "Bi-encoder teacher" in (run_dir / "report.md").read_text()
    assert counts["sentences"] == 120 and counts["target_train"] == 0
    assert counts["trained_on"]["augsbert_bm25"] == counts["labeled"]["bm25"] == counts["candidates"]["bm25"] > 0


@pytest.mark.slow
def test_a_fit_reads_the_silver_scores_and_bf16_changes_its_weights(ray_session, tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    """A fit reads a silver file's scores as its targets (1 - s: other weights; that every loss meant for scores reads
    them, test_each_regression_loss_reads_the_silver_scores shows), and training.bf16 (autocast) gives other weights,
    kept in fp32. (That the same scores give the same weights, the kill test's resumed run and tests/test_tuning.py's
    exact resume show.)"""
    from safetensors.numpy import load_file

    from augsbert_ray.training import fit_bi_encoder
    from augsbert_ray.training.ray_fit import read_training_pairs

    gold = load_gold(DataSpec(train_limit=64), seed=0, data_dir=data_dir)
    scores = np.random.default_rng(0).uniform(size=64).astype(np.float32)
    pairs = gold.train.select(["sentence1", "sentence2"])
    weights = {}
    for name, values in (("silver", scores), ("flipped", 1 - scores)):
        pq.write_table(pairs.append_column("score", pa.array(values)), tmp_path / f"{name}.parquet")
        read = read_training_pairs([(str(tmp_path / f"{name}.parquet"), "score")])
        assert np.array_equal(read.column("label").to_numpy(), values) and read.select(["sentence1", "sentence2"]).equals(pairs)
    for name, bf16 in (("silver", False), ("bf16", True)):  # the same scores: bf16 changes only the arithmetic
        model_dir = tmp_path / "models" / name
        fit_bi_encoder(BiEncoderSpec(model=str(tiny_model), batch_size=16, learning_rate=1e-3), str(tiny_model),
                       [(str(tmp_path / "silver.parquet"), "score")],
                       FIT_HERE.model_copy(update={"bf16": bf16}), 0, tmp_path / "ray_train", name, model_dir)
        weights[name] = load_file(str(model_dir / "model.safetensors"))

    def moved(name: str) -> float:
        return max(float(np.abs(weights["silver"][key] - weights[name][key]).max()) for key in weights["silver"])

    assert moved("bf16") > 1e-4
    assert all(array.dtype == np.float32 for array in weights["bf16"].values())


@pytest.mark.parametrize("loss", ["cosine", "cosent"])
def test_each_regression_loss_reads_the_silver_scores(tiny_model: Path, loss: str) -> None:
    """The same pairs with scores s and 1 - s give other loss values, under every loss meant for scores."""
    import torch
    from sentence_transformers import SentenceTransformer

    from augsbert_ray.training.bi_encoder import bi_encoder_loss

    model = SentenceTransformer(str(tiny_model))
    objective = bi_encoder_loss(model, BiEncoderSpec(model=str(tiny_model), loss=loss))
    features = [model.tokenize([f"sentence {i} of side {side}" for i in range(8)]) for side in ("a", "b")]
    scores = torch.linspace(0.05, 0.95, 8)
    with torch.no_grad():
        assert abs(float(objective(features, scores)) - float(objective(features, 1 - scores))) > 1e-4


def test_online_contrastive_thresholds_silver_scores_at_one_half(tiny_model: Path) -> None:
    """Before: sentence-transformers' loss ignored every label but exactly 0 and 1, so every silver pair: loss 0."""
    import torch
    from sentence_transformers import SentenceTransformer

    from augsbert_ray.training.bi_encoder import bi_encoder_loss

    model = SentenceTransformer(str(tiny_model))
    objective = bi_encoder_loss(model, BiEncoderSpec(model=str(tiny_model), loss="online_contrastive"))
    features = [model.tokenize([f"sentence {i} of side {side}" for i in range(4)]) for side in ("a", "b")]
    with torch.no_grad():
        silver = float(objective(features, torch.tensor([0.91, 0.84, 0.07, 0.12])))
        assert silver > 0 and silver == pytest.approx(float(objective(features, torch.tensor([1.0, 1.0, 0.0, 0.0]))))


@pytest.mark.slow
def test_a_cross_encoder_fit_is_reproduced_by_its_seed(ray_session, tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    """The new classification head is seeded too, so two fits with one seed make the same teacher (as the two
    runs of a seed made in parts by bench/reproduce.py --part need), and another seed another one."""
    from safetensors.numpy import load_file

    from augsbert_ray.training import fit_cross_encoder

    gold = load_gold(DataSpec(train_limit=32), seed=0, data_dir=data_dir)
    path = tmp_path / "gold.parquet"
    pq.write_table(gold.train, path)
    weights = {}
    for name, seed in (("first", 1), ("again", 1), ("other", 2)):
        model_dir = tmp_path / "models" / name
        fit_cross_encoder(CrossEncoderSpec(model=str(tiny_model), epochs=1, batch_size=16), str(tiny_model),
                          [(str(path), "label")], FIT_HERE, seed, tmp_path / "ray_train" / name, model_dir)
        weights[name] = load_file(str(model_dir / "model.safetensors"))
    assert all(np.array_equal(weights["first"][key], weights["again"][key]) for key in weights["first"])
    assert any(not np.array_equal(weights["first"][key], weights["other"][key]) for key in weights["first"])

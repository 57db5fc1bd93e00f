import numpy as np
import pytest

from augsbert_ray.evaluation import (
    Evaluation, auc_at_fpr, best_threshold, f1_at, jaccard_scores, majority_baseline, metrics_from_scores, spearman_x100,
)


def test_spearman_by_hand() -> None:
    # ranks (1,2,3,4) vs (1,3,2,4): d^2 = 0+1+1+0 = 2 -> rho = 1 - 6*2/(4*15) = 0.8
    assert spearman_x100([0.1, 0.2, 0.3, 0.4], [1, 3, 2, 4]) == pytest.approx(80.0)


def test_f1_and_threshold_by_hand() -> None:
    scores, labels = [0.1, 0.35, 0.4, 0.8], [0, 1, 0, 1]
    # threshold 0.35: predicted 1 for 0.35, 0.4, 0.8 -> tp=2, fp=1, fn=0 -> P=2/3, R=1 -> F1=0.8
    assert f1_at(scores, labels, 0.35) == pytest.approx(80.0)
    # threshold 0.8: tp=1, fp=0, fn=1 -> F1 = 2/3
    assert f1_at(scores, labels, 0.8) == pytest.approx(200 / 3)
    assert best_threshold(scores, labels) == pytest.approx(0.35)
    assert f1_at(scores, labels, 0.9) == 0.0


def test_best_threshold_equals_trying_every_score() -> None:
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 50, 400):
        scores = np.round(rng.random(size), 2)  # rounded: many ties
        labels = rng.integers(0, 2, size)
        f1s = {float(t): f1_at(scores, labels, t) for t in np.unique(scores)}
        best = max(f1s.values())
        assert best_threshold(scores, labels) == max(t for t, f1 in f1s.items() if f1 == best)


def test_auc05_by_hand() -> None:
    assert auc_at_fpr([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == pytest.approx(1.0)
    assert auc_at_fpr([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == pytest.approx(0.0)
    # 1 positive ranked first, then 20 negatives, then the other positive: TPR is 0.5 over FPR [0, 0.05]
    scores = [1.0] + [0.5 - i * 0.01 for i in range(20)] + [0.0]
    labels = [1] + [0] * 20 + [1]
    assert auc_at_fpr(scores, labels) == pytest.approx(0.5)
    # one negative on top of everything: FPR jumps to 1/20 = 0.05 before any positive -> area 0
    assert auc_at_fpr([1.0] + [0.9, 0.8] + [0.1] * 19, [0, 1, 1] + [0] * 19) == pytest.approx(0.0)


def test_jaccard_by_hand() -> None:
    got = jaccard_scores(["A cat sat.", "x"], ["a cat ran", "y"])
    assert got.tolist() == pytest.approx([2 / 4, 0.0])


def test_majority_baseline_gives_every_pair_devs_majority_class() -> None:
    # dev 2 of 3 positive: every test pair positive, tp=1, fp=3 -> F1 = 2/5; dev: tp=2, fp=1 -> 0.8
    assert majority_baseline(np.array([1, 1, 0]), np.array([1, 0, 0, 0])) == Evaluation(80.0, 40.0)
    assert majority_baseline(np.array([1, 0]), np.array([1, 0])).test == pytest.approx(200 / 3)  # a tie: positive
    assert majority_baseline(np.array([0, 0, 1]), np.array([1, 1])) == Evaluation(0.0, 0.0)  # no positive predicted


def test_classification_threshold_comes_from_dev() -> None:
    dev_scores, dev_labels = np.array([0.2, 0.6, 0.7]), np.array([0, 1, 1])
    test_scores, test_labels = np.array([0.55, 0.65, 0.1]), np.array([1, 1, 0])
    result = metrics_from_scores("classification", dev_scores, dev_labels, test_scores, test_labels)
    assert result.threshold == pytest.approx(0.6)
    assert result.test == pytest.approx(200 * 0.5 / 1.5)  # only 0.65 predicted positive: P=1, R=0.5
    assert result.test_auc05 == pytest.approx(1.0)  # the negative ranks last


def test_a_classification_report_shows_test_auc05_beside_f1(tmp_path) -> None:
    """AUC(0.05), the paper's metric for the transfer targets, was only in metrics.json's details."""
    import json
    from pathlib import Path

    from augsbert_ray.config import load_spec
    from augsbert_ray.report import write_report

    run = Path(__file__).parents[1] / "bench/results/reproduce_best_teacher_runs/mrpc-full-seed42_lexical-20261127-162950"
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["dev"]["majority"], metrics["test"]["majority"] = 80.0, 79.87  # made before this baseline was
    metrics["details"]["majority"] = {"dev": 80.0, "test": 79.87}
    write_report(load_spec(None, ["data.dataset=mrpc"]), metrics, tmp_path / "report.md")
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert "| model | dev | test | test AUC(0.05) x100 | trained on (pairs) |" in lines
    assert f"| SBERT (gold only) | 84.03 | 83.31 | {100 * metrics['details']['sbert']['test_auc05']:.2f} | 3668 |" in lines
    assert "| Majority-class baseline (every pair dev's majority class) | 80.00 | 79.87 |  |  |" in lines  # no AUC


def test_a_silver_set_that_kept_nothing_reads_n_a_in_the_report(tmp_path) -> None:
    """Before: its undefined KL divergence and share were NaN, written as `nan`."""
    import json
    from pathlib import Path

    from augsbert_ray.config import load_spec
    from augsbert_ray.report import write_report

    run = Path(__file__).parents[1] / "bench/results/reproduce_best_teacher_runs/mrpc-full-seed42_lexical-20261127-162950"
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["sampling"]["bm25"].update(kept=0, kl_gold_silver=None, high_similarity_share=None)
    write_report(load_spec(None, ["data.dataset=mrpc"]), metrics, tmp_path / "report.md")
    assert f"| bm25 | {metrics['sampling']['bm25']['candidates']} | 0 | n/a | n/a |" in (tmp_path / "report.md").read_text().splitlines()


def test_report_counts_add_up(tmp_path) -> None:
    """Before: the cross-encoder's column counted both orders of each pair as pairs (twice SBERT's), and a strategy's
    line left its labeling rejects implicit; eval_limit and a split given as a file of its own dropped gold pairs
    with no count."""
    import json
    from pathlib import Path

    from augsbert_ray.config import load_spec
    from augsbert_ray.report import write_report

    run = Path(__file__).parents[1] / "bench/results/reproduce_best_teacher_runs/mrpc-full-seed42_lexical-20261127-162950"
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["counts"]["labeled"]["bm25"] -= 3
    metrics["counts"].update(gold_replaced_by_files=850, gold_eval_limit_dropped={"dev": 208, "test": 1525})
    write_report(load_spec(None, ["data.dataset=mrpc"]), metrics, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    candidates, labeled, kept = (metrics["counts"][key]["bm25"] for key in ("candidates", "labeled", "kept"))
    assert f"- bm25: {candidates} candidates = {labeled} labeled + 3 rejected by labeling; {kept} kept" in text
    assert "| 7336 (3668 pairs in both orders) |" in text
    assert "- gold pairs of the dataset's own splits given as files instead: 850" in text
    assert "- gold dev/test pairs left out by eval_limit: dev 208, test 1525" in text

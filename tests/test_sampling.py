import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import augsbert_ray.sampling as sampling_module
from augsbert_ray.config import DataSpec, LabelingSpec, SamplingSpec
from augsbert_ray.data import load_gold
from augsbert_ray.sampling import SentencePool, candidate_table
from augsbert_ray.sampling.bm25 import bm25_neighbours
from augsbert_ray.sampling.neighbours import merge_ranked
from augsbert_ray.sampling.semantic import build_index
from augsbert_ray.sampling.random_pairs import _triangle_to_pair


@pytest.fixture(scope="module")
def gold(data_dir):
    return load_gold(DataSpec(train_limit=400), seed=3, data_dir=data_dir)


def pair_set(table: pa.Table) -> list[frozenset]:
    return [frozenset(p) for p in zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist())]


def test_triangle_mapping_covers_every_pair_once() -> None:
    for n in (2, 3, 10, 57):
        i, j = _triangle_to_pair(np.arange(n * (n - 1) // 2), n)
        assert np.all(i < j) and np.all(j < n)
        assert len(set(zip(i.tolist(), j.tolist()))) == n * (n - 1) // 2


def check_invariants(table: pa.Table, gold, strategy: str) -> list[frozenset]:
    pairs = pair_set(table)
    gold_pairs = {frozenset(p) for split in (gold.train, gold.dev, gold.test) for p in pair_set(split)}
    assert table.num_rows > 0
    assert all(len(p) == 2 for p in pairs), "self-pair"
    assert not set(pairs) & gold_pairs, "gold pair among candidates"
    assert len(set(pairs)) == len(pairs), "duplicate in either order"
    assert set(table.column("strategy").to_pylist()) == {strategy}
    return pairs


@pytest.mark.parametrize("strategy", ["bm25", "random", "kde"])
def test_candidate_invariants(gold, strategy: str) -> None:
    pool = SentencePool.from_pairs(gold.train)
    excluded = pool.gold_codes([gold.train, gold.dev, gold.test])
    table = candidate_table(strategy, pool, excluded, SamplingSpec(), seed=5, n_random=1500)
    pairs = check_invariants(table, gold, strategy)
    again = candidate_table(strategy, pool, excluded, SamplingSpec(), seed=5, n_random=1500)
    assert again.equals(table)
    if strategy != "bm25":
        assert table.num_rows == 1500
        other = candidate_table(strategy, pool, excluded, SamplingSpec(), seed=6, n_random=1500)
        assert set(pair_set(other)) != set(pairs)


def test_semantic_candidate_invariants(ray_session, gold, tiny_model, monkeypatch) -> None:
    """semantic and bm25+semantic (one test: each semantic search starts an embedding actor pool, three here): the
    invariants of each, the same table from a search made again, and a union that searches neither again."""
    pool = SentencePool.from_pairs(gold.train)
    excluded = pool.gold_codes([gold.train, gold.dev, gold.test])
    kwargs = {"semantic_model": str(tiny_model), "resources": LabelingSpec()}
    found: dict = {}
    semantic = candidate_table("semantic", pool, excluded, SamplingSpec(top_k=2), seed=5, found=found, **kwargs)
    semantic_pairs = check_invariants(semantic, gold, "semantic")
    assert semantic.num_rows <= 2 * len(pool)
    assert candidate_table("semantic", pool, excluded, SamplingSpec(top_k=2), seed=5, **kwargs).equals(semantic)  # searched again

    union = candidate_table("bm25+semantic", pool, excluded, SamplingSpec(top_k=2), seed=5, **kwargs)  # both searched anew
    pairs = check_invariants(union, gold, "bm25+semantic")
    assert union.num_rows <= 2 * len(pool) * 2
    bm25 = set(pair_set(candidate_table("bm25", pool, excluded, SamplingSpec(top_k=2), seed=5, found=found)))
    assert set(pairs) == bm25 | set(semantic_pairs)
    # given the neighbours that bm25 and semantic found, the union searches neither again
    for search in ("sample_bm25", "sample_semantic"):
        monkeypatch.setattr(sampling_module, search, lambda *args, name=search: pytest.fail(f"{name} ran again"))
    assert candidate_table("bm25+semantic", pool, excluded, SamplingSpec(top_k=2), seed=5, found=found, **kwargs).equals(union)


def test_random_pools_are_sized_by_bm25_whether_or_not_it_runs(gold) -> None:
    from augsbert_ray.pipeline.silver import random_pool_sizes

    pool = SentencePool.from_pairs(gold.train)
    excluded = pool.gold_codes([gold.train, gold.dev, gold.test])
    sampling = SamplingSpec(strategies=["kde"])
    searched: dict = {}
    bm25_count = candidate_table("bm25", pool, excluded, sampling, seed=5, found=searched).num_rows
    # a run without BM25 draws the pools that a run with it draws: as many random pairs, 10x for KDE; the search it
    # makes to count them is kept for a bm25+semantic of the run (before: it searched again)
    not_searched: dict = {}
    assert random_pool_sizes(sampling, pool, excluded, not_searched) == random_pool_sizes(sampling, pool, excluded, searched)
    assert random_pool_sizes(sampling, pool, excluded, {}) == {"random": bm25_count, "kde": 10 * bm25_count}
    assert np.array_equal(not_searched["bm25"][0], searched["bm25"][0])
    asked = SamplingSpec(random_pairs=700, kde_pool=900)
    assert random_pool_sizes(asked, pool, excluded, {}) == {"random": 700, "kde": 900}


def test_what_sampling_asks_of_the_pool_is_checked_before_any_fit() -> None:
    """Before: each failed in make_silver, after the teacher and SBERT fits; an unusable BM25-sized default said
    'the number of random pairs must be positive, got 0', naming nothing the user set."""
    from augsbert_ray.config import SpecError, load_spec
    from augsbert_ray.pipeline.silver import CandidateSource, check_candidates, random_pool_sizes

    seven = CandidateSource(SentencePool([f"apple s{i}" for i in range(7)]), np.zeros(0, np.int64), np.zeros(0))
    check_candidates(load_spec(None, ["sampling.strategies=[bm25, kde]", "sampling.top_k=6", "sampling.kde_pool=21"]), seven)
    for overrides, error, message in [
        (["sampling.top_k=7"], ValueError, "sampling.top_k=7 asks for more neighbours than the 6 other sentences"),
        (["tuning.seeds=2", "tuning.top_k=[3, 9]"], ValueError, "tuning.top_k=9 asks for more neighbours than the 6 other sentences"),
        (["sampling.strategies=[kde]", "sampling.kde_pool=100"], SpecError, "sampling.kde_pool 100: the 7 sentences make only 21 pairs that are not gold"),
        (["sampling.strategies=[random]", "sampling.random_pairs=22"], SpecError, "sampling.random_pairs 22: the 7 sentences make only 21"),
    ]:
        with pytest.raises(error, match=re.escape(message)):
            check_candidates(load_spec(None, overrides), seven)
    pool = SentencePool(["a b", "c d"])
    all_gold = CandidateSource(pool, pool.encode(np.array([0]), np.array([1])), np.zeros(1))
    with pytest.raises(SpecError, match="sampling.strategies random: the 2 sentences make no pair that is not a gold pair"):
        check_candidates(load_spec(None, ["sampling.strategies=[random]", "sampling.random_pairs=1"]), all_gold)
    no_shared_word = SentencePool(["猫が寝る", "犬が吠える", "鳥が歌う", "魚が泳ぐ"])  # no spaces: a token per sentence
    with pytest.raises(SpecError, match="BM25 finds none here .*; set sampling.random_pairs"):
        random_pool_sizes(SamplingSpec(strategies=["random"], top_k=1), no_shared_word, np.zeros(0, np.int64), {})
    # the same found before any fit (before: after the teacher and SBERT fits), and for BM25's own candidates
    unsegmented = CandidateSource(no_shared_word, np.zeros(0, np.int64), np.zeros(0))
    for strategies, advice in [("[random]", "set sampling.random_pairs"), ("[bm25]", "drop bm25 from sampling.strategies")]:
        with pytest.raises(SpecError, match=rf"^sampling: no two of the 4 sentences share a word BM25 indexes .*BM25 finds no pair; .*{advice}$"):
            check_candidates(load_spec(None, [f"sampling.strategies={strategies}", "sampling.top_k=1"]), unsegmented)
    check_candidates(load_spec(None, ["sampling.strategies=[random, kde]", "sampling.random_pairs=3", "sampling.kde_pool=6"]), unsegmented)


def test_asking_for_most_pairs_draws_a_permutation_of_them() -> None:
    """Before: rejection draws of the last few pairs took a minute for 1,124,250 pairs; now a second."""
    from augsbert_ray.sampling.random_pairs import available_pairs, sample_random

    pool = SentencePool([f"s{i}" for i in range(300)])
    excluded = pool.encode(np.arange(10), np.arange(10) + 1)
    every = available_pairs(pool, excluded)
    codes = sample_random(pool, every, excluded, seed=4)
    assert len(np.unique(codes)) == every and not np.isin(codes, excluded).any()
    np.testing.assert_array_equal(sample_random(pool, every // 2 + 1, excluded, seed=4), sample_random(pool, every // 2 + 1, excluded, seed=4))
    assert not np.array_equal(sample_random(pool, every // 2 + 1, excluded, seed=4), sample_random(pool, every // 2 + 1, excluded, seed=5))


# A stand-in for jax: bm25s runs jax.lax.top_k when it is imported, and this records the platform jax would use then.
FAKE_JAX = {
    "jax/__init__.py": "",
    "jax/lax.py": "import os\nprint('jax platforms at bm25s import:', os.environ.get('JAX_PLATFORMS'))\n"
                  "def top_k(scores, k):\n    return scores[:k], list(range(k))\n",
}


@pytest.mark.parametrize("user_setting, seen", [(None, "cpu"), ("cuda", "cuda")])
def test_bm25s_import_keeps_jax_off_the_gpu_unless_the_user_chose(tmp_path: Path, user_setting: str | None, seen: str) -> None:
    for name, text in FAKE_JAX.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    if user_setting:
        env["JAX_PLATFORMS"] = user_setting
    result = subprocess.run([sys.executable, "-c", "import augsbert_ray.sampling.bm25"], env=env, capture_output=True, text=True, check=True)
    assert f"jax platforms at bm25s import: {seen}" in result.stdout


def test_bm25_keeps_top_k_per_query() -> None:
    sentences = [f"apple banana {w}" for w in ("cherry", "date", "elder", "fig", "grape")] + ["zebra only", "zebra too"]
    pool = SentencePool(sentences)
    table = candidate_table("bm25", pool, np.empty(0, np.int64), SamplingSpec(top_k=2), seed=0)
    assert table.num_rows <= 7 * 2  # each query contributes at most 2; the union is de-duplicated
    pairs = set(pair_set(table))
    assert frozenset({"zebra only", "zebra too"}) in pairs
    # a pair with no shared term is never a neighbour
    assert not any(any("zebra" in s for s in p) and any("apple" in s for s in p) for p in pairs)


def test_sharded_bm25_equals_unsharded(ray_session, gold) -> None:
    import bm25s

    sentences = SentencePool.from_pairs(gold.train).sentences
    depth = 6
    ids, scores = bm25_neighbours(sentences, depth, shard_size=len(sentences))
    sharded_ids, sharded_scores = bm25_neighbours(sentences, depth, shard_size=97, query_chunk=150)
    np.testing.assert_allclose(sharded_scores, scores, rtol=1e-5)
    # every hit that clearly beats the last one kept is found by both (the scores differ in their last float bits)
    def clear_hits(found: np.ndarray, found_scores: np.ndarray) -> np.ndarray:
        return np.sort(np.where(found_scores > found_scores[:, -1:] + 1e-4, found, -1), axis=1)

    np.testing.assert_array_equal(clear_hits(sharded_ids, sharded_scores), clear_hits(ids, scores))
    # exact ties at the depth are ranked by id in each shard as in the whole (before, bm25s chose among them)
    tied = [f"cat t{i:03d}" for i in range(40)]
    np.testing.assert_array_equal(bm25_neighbours(tied, 3, shard_size=7)[0], bm25_neighbours(tied, 3, shard_size=40)[0])
    # one shard searched in this process, its queries in chunks: the same as one chunk
    chunked_ids, chunked_scores = bm25_neighbours(sentences, depth, shard_size=len(sentences), query_chunk=150)
    np.testing.assert_array_equal(chunked_ids, ids)
    np.testing.assert_array_equal(chunked_scores, scores)
    # and one shard is plain bm25s over the whole corpus, every sentence ranked by score, then id
    reference = bm25s.BM25(backend="numba")
    tokens = bm25s.tokenize(sentences, stopwords="en", show_progress=False)
    reference.index(tokens, show_progress=False)
    reference_ids, reference_scores = reference.retrieve(tokens, k=len(sentences), show_progress=False)
    ranked_ids, ranked_scores = merge_ranked([(reference_ids.astype(np.int64), reference_scores.astype(np.float32))], depth)
    positive = scores > 0  # zero-score hits are never neighbours, whichever bm25s returns
    np.testing.assert_array_equal(np.where(positive, ids, -1), np.where(ranked_scores > 0, ranked_ids, -1))
    np.testing.assert_array_equal(scores, ranked_scores)


def test_bm25_ties_at_the_depth_are_ranked_by_id_and_a_sentence_without_tokens_finds_nothing() -> None:
    """Before: bm25s chose among tied hits by its own rule, and a first query without tokens ("1.") failed the
    whole search with bm25s' 'query_tokens must be a list of list of tokens'."""
    tied = [f"cat t{i:03d}" for i in range(40)]  # every "cat" hit scores the same
    ids, _ = bm25_neighbours(tied, 3, shard_size=len(tied))
    np.testing.assert_array_equal(ids[20], [20, 0, 1])
    ids, scores = bm25_neighbours(["1.", "Cats sleep a lot.", "Cats and dogs play.", "Dogs bark at night."], 2, shard_size=10)
    assert (ids[0] == -1).all() and (scores[0] == 0).all()
    assert ids[1, 0] == 1 and ids[1, 1] == 2  # itself first, then the other cat sentence
    assert bm25_neighbours(["1.", "2.", "?"], 2, shard_size=10)[0].shape == (3, 0)  # no token anywhere: no hits


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_faiss_top_k_matches_brute_force_cosine(kind: str) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    _, ids = build_index(vectors, kind, threshold=10_000).search(vectors, 5)
    brute = np.argsort(-(vectors @ vectors.T), axis=1)[:, :5]
    recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(ids, brute)])
    assert recall == 1.0 if kind == "flat" else recall > 0.85, recall


def test_bad_sampling_input_is_an_error() -> None:
    empty = np.empty(0, np.int64)
    with pytest.raises(ValueError, match="top_k must be positive"):
        candidate_table("bm25", SentencePool(["a b", "a c"]), empty, SamplingSpec.model_construct(top_k=0), seed=0)
    with pytest.raises(ValueError, match="more neighbours than the 2 other sentences"):
        candidate_table("bm25", SentencePool(["a b", "a c", "a d"]), empty, SamplingSpec(top_k=3), seed=0)
    with pytest.raises(ValueError, match="empty corpus"):
        candidate_table("bm25", SentencePool([]), empty, SamplingSpec(), seed=0)
    with pytest.raises(ValueError, match="single sentence"):
        candidate_table("bm25", SentencePool(["alone"]), empty, SamplingSpec(), seed=0)
    with pytest.raises(ValueError, match="corpus of 1 sentence"):
        candidate_table("random", SentencePool(["alone"]), empty, SamplingSpec(), seed=0, n_random=1)
    pool = SentencePool(["a", "b", "c", "d"])
    excluded = pool.gold_codes([pa.table({"sentence1": ["a"], "sentence2": ["b"]})])
    assert candidate_table("random", pool, excluded, SamplingSpec(), seed=0, n_random=5).num_rows == 5
    with pytest.raises(ValueError, match="asked for 6 random pairs but the pool of 4 sentences has only 5"):
        candidate_table("random", pool, excluded, SamplingSpec(), seed=0, n_random=6)

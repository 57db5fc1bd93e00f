"""Label what a user holds, as `augsbert label` does: pair files (``label_files``), or a sentence list paired with a
sampling strategy (``label_sentences``), with a teacher given as a Teacher, a model directory, an alias or a Hugging
Face id, or a run's teacher.json.

Errors name the `augsbert label` options (``--pairs``, ``--top-k``, ``--sentences``, ``--output``) and the labeling
settings (``labeling.precision``), as the rest of the package words its errors.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.config import LabelingSpec, SamplingSpec, SpecError, check_output_dir
from augsbert_ray.data import read_sentences
from augsbert_ray.labeling import engine
from augsbert_ray.labeling.dataset import load_teacher
from augsbert_ray.labeling.engine import label_dataset, labels_in_process
from augsbert_ray.labeling.job import LabelJob, LabelResult
from augsbert_ray.scoring import Teacher
from augsbert_ray.runtime import chatter_to, check_cpu_bf16, init_ray, ray_output_kept_off_console
from augsbert_ray.sampling import SentencePool, available_pairs, candidate_table
from augsbert_ray.sampling.neighbours import check_top_k

STRATEGIES = ("random", "bm25")  # the strategies that pair a bare sentence list (the others need a bi-encoder or gold)
NO_PAIRS = np.zeros(0, dtype=np.int64)  # a sentence list has no gold pairs to exclude
LABEL_LOG = "_label.log"  # Ray's and the libraries' output, unless verbose


def label_files(
    inputs: str | Path | Sequence[str | Path],
    output: str | Path,
    teacher: Teacher | str | Path,
    spec: LabelingSpec | None = None,
    *,
    text_columns: str | Sequence[str] = ("sentence1", "sentence2"),
    format: str | None = None,
    address: str | None = None,
    verbose: bool = True,
    **settings: Any,
) -> LabelResult:
    """Label every pair of the input files with a teacher into resumable Parquet shards under ``output``: what
    `augsbert label --input` does. The inputs and the teacher are checked before Ray starts; with one CPU actor and
    no Ray running or asked for, the labeling runs in this process.

    Args:
        inputs: A pair file (csv, jsonl, parquet), a glob, a directory, or a list of files.
        output: The shards' directory (part-*.parquet, _manifest.json, _rejects.jsonl); a rerun into it with the same
            arguments skips the shards already labeled.
        teacher: A Teacher, a run's teacher.json, or a cross-encoder (a directory, an alias or a Hugging Face id).
        spec: The labeling settings (batch size, actor pool, precision, shard size); default: ``settings``.
        text_columns: The inputs' two sentence columns, as a pair or as ``"first,second"``.
        format: ``parquet``, ``csv`` or ``jsonl``; default: from the file suffix.
        address: A Ray cluster to join ('auto' or an address); default: an embedded local Ray.
        verbose: Leave Ray's and the libraries' output on the console; False: it goes to ``output/_label.log``, the
            console keeps the augsbert log lines, and what Ray forwards from its workers after the call is dropped.
        settings: LabelingSpec fields, when ``spec`` is not given (e.g. ``batch_size=128``).

    Returns:
        The LabelResult: the output directory, the per-shard counts, the manifest and the rejects file.

    Example:
        >>> _ = (tmp_dir / "in.csv").write_text("sentence1,sentence2\\nA man plays.,A man is playing.\\nA cat sleeps.,\\n")
        >>> result = label_files(tmp_dir / "in.csv", tmp_dir / "silver", cross_encoder_dir, batch_size=128)
        >>> print(result.summary())
        pairs in 2 = labeled 1 + rejected 1 (truncated to max_seq_length: 0; shards: 1, 0 already done)
    """
    spec = _labeling_spec(spec, settings, address)
    loaded = load_teacher(teacher)
    job = LabelJob(loaded, spec, text_columns=_text_columns(text_columns))
    with _chatter(Path(output), verbose):
        return engine.label_files(_patterns(inputs), output, job, fmt=format, address=address)


def label_sentences(
    sentences: str | Path | Sequence[str],
    output: str | Path,
    teacher: Teacher | str | Path,
    spec: LabelingSpec | None = None,
    *,
    strategy: str = "random",
    pairs: int | None = None,
    top_k: int = 3,
    seed: int = 42,
    address: str | None = None,
    verbose: bool = True,
    **settings: Any,
) -> LabelResult:
    """Pair a sentence list with a sampling strategy and label the pairs with a teacher into resumable Parquet shards
    under ``output``: what `augsbert label --sentences` does. The pairs are checked against the sentences before
    Ray starts; they are kept as ``output/_candidates/<strategy>.parquet``.

    Args:
        sentences: A sentence file (.txt, one per line, or a csv/jsonl/parquet file with a ``sentence`` column), or
            the sentences themselves.
        output: The shards' directory; a rerun into it with the same arguments skips the shards already labeled.
        teacher: A Teacher, a run's teacher.json, or a cross-encoder (a directory, an alias or a Hugging Face id).
        spec: The labeling settings; default: ``settings``.
        strategy: ``random`` (``pairs`` random pairs) or ``bm25`` (each sentence with its ``top_k`` BM25 neighbours).
        pairs: With ``random``: pairs to draw; default ``top_k`` per sentence, at most every pair.
        top_k: BM25 neighbours per sentence, or random pairs per sentence.
        seed: Seeds the random pairs.
        address: A Ray cluster to join ('auto' or an address); default: an embedded local Ray.
        verbose: Leave Ray's and the libraries' output on the console; False: it goes to ``output/_label.log``, and
            what Ray forwards from its workers after the call is dropped.
        settings: LabelingSpec fields, when ``spec`` is not given.

    Returns:
        The LabelResult of the labeled pairs.

    Example:
        >>> sentences = ["A man plays chess.", "A woman plays golf.", "A dog runs in the park."]
        >>> label_sentences(sentences, tmp_dir / "pairs", cross_encoder_dir, strategy="random", pairs=2).labeled
        2

        With BM25, each sentence's ``top_k`` nearest: ``label_sentences("sentences.txt", "silver",
        "runs/<run>/models/teacher.json", strategy="bm25", top_k=5)``.
    """
    if strategy not in STRATEGIES:
        raise SpecError(f"strategy {strategy!r}: a sentence list is paired with one of {', '.join(STRATEGIES)}")
    spec = _labeling_spec(spec, settings, address)
    loaded = load_teacher(teacher)
    if strategy == "bm25" and pairs is not None:
        raise SpecError("--pairs draws random pairs; --strategy bm25 pairs each sentence with its --top-k BM25 neighbours")
    named = isinstance(sentences, (str, Path))
    origin = str(sentences) if named else "the sentence list"
    pool = SentencePool(read_sentences(Path(sentences)) if named else [str(sentence) for sentence in sentences])
    n_random = _random_pairs(pool, strategy, pairs, top_k, origin)
    job = LabelJob(loaded, spec, strategy=strategy)
    output = Path(output)
    check_output_dir(output, "--output")  # before Ray starts and the pairs are made
    with _chatter(output, verbose):
        init_ray(address, dashboard=False)
        here = labels_in_process(spec, address)  # the pairs were made on this machine's Ray
        candidates = candidate_table(strategy, pool, NO_PAIRS, SamplingSpec(strategies=[strategy], top_k=top_k), seed, n_random=n_random)
        return label_dataset(candidates, output, job, output / "_candidates" / f"{strategy}.parquet", here)


@contextmanager
def _chatter(output: Path, verbose: bool) -> Iterator[None]:
    """Unless ``verbose``: Ray's and the libraries' output goes to ``output/_label.log`` (runtime.chatter_to). It is
    kept in a temporary file until the end, as a call refused before it labels makes no output directory; and where
    the output's disk is full, it stays there."""
    if verbose:
        yield
        return
    handle, name = tempfile.mkstemp(prefix="augsbert-label-", suffix=".log")
    os.close(handle)
    temporary = Path(name)
    try:
        with chatter_to(temporary, shown_as=output / LABEL_LOG), ray_output_kept_off_console():
            yield
    finally:
        if output.is_dir():
            with contextlib.suppress(OSError), (output / LABEL_LOG).open("ab") as kept:
                kept.write(temporary.read_bytes())
                temporary.unlink()
        else:
            temporary.unlink(missing_ok=True)


def _labeling_spec(spec: LabelingSpec | None, settings: dict[str, Any], address: str | None) -> LabelingSpec:
    """``spec``, or one made of ``settings``; bf16 asked of this machine's CPU must be there."""
    if spec is not None and settings:
        raise TypeError(f"give a LabelingSpec or its settings, not both (got {', '.join(settings)})")
    spec = spec if spec is not None else LabelingSpec(**settings)
    check_cpu_bf16(address, {"labeling.precision bf16": spec.bf16_on_cpu})
    return spec


def _text_columns(text_columns: str | Sequence[str]) -> tuple[str, str]:
    columns = tuple(text_columns.split(",")) if isinstance(text_columns, str) else tuple(text_columns)
    if len(columns) != 2 or not all(columns):
        raise SpecError(f"--text-columns expects two names, e.g. sentence1,sentence2; got {text_columns!r}")
    return columns[0], columns[1]


def _patterns(inputs: str | Path | Sequence[str | Path]) -> str | list[str]:
    """The engine's input patterns: a path as text, a list of paths as texts."""
    if isinstance(inputs, Path):
        return str(inputs)
    return [str(path) for path in inputs] if isinstance(inputs, (list, tuple)) else inputs  # type: ignore[return-value]


def _random_pairs(pool: SentencePool, strategy: str, pairs: int | None, top_k: int, origin: str) -> int:
    """``pairs``, else ``top_k`` per sentence, as far as the pool has pairs; checked before Ray starts."""
    available = available_pairs(pool, NO_PAIRS)
    if strategy == "bm25":
        try:
            check_top_k(pool, top_k, "--top-k")
        except ValueError as exc:
            raise SpecError(f"--sentences {origin}: {exc}") from None
    elif pairs is not None and pairs > available:
        raise SpecError(f"--pairs {pairs}: the {len(pool)} distinct sentences of {origin} make only {available} pairs")
    return pairs or min(top_k * len(pool), available)

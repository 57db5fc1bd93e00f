"""A tiny random BERT for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

from augsbert_ray.models.resolve import resolve_model


def build_tiny_bert(directory: Path) -> Path:
    """Save a tiny random BERT (hidden 32, one layer) with the MiniLM tokenizer: tests train it in seconds, and
    benchmarks use it to time the engine apart from the model.

    Args:
        directory: Where the model and tokenizer are saved (created if missing).

    Example:
        >>> from sentence_transformers import CrossEncoder
        >>> CrossEncoder(str(build_tiny_bert(Path("/tmp/tiny"))), num_labels=1)  # doctest: +SKIP
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)  # the same tiny model in every test session
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    directory.mkdir(parents=True, exist_ok=True)
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory

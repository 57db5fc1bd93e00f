"""A tiny BERT (hidden 32, 1 layer) with the MiniLM tokenizer, so that tests train in seconds."""

from __future__ import annotations

from pathlib import Path


def build_tiny_bert(directory: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from augsbert_ray.models import resolve_model

    torch.manual_seed(seed)
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

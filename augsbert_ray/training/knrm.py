"""KNRM over a transformer's contextual token embeddings (the thesis's "KNRM BERT" baseline), trained on Ray Train.

Xiong et al. (SIGIR 2017) match every query token with every document token by cosine, pool the matrix with RBF
kernels into soft match counts per similarity level, and rank with a linear layer over their logs. Here the token
vectors come from a transformer (the student, say) that encodes query and document apart, and it is fine-tuned with
the kernels' weights. The fit is a plain torch loop in a Ray Train worker, as the other fits are (one storage, GPU
workers, DDP, the final model as the checkpoint), since KNRM is no model that sentence-transformers' trainers know.
DRMM is left out: its histograms of counts give the encoder no gradient.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from augsbert_ray.config import EncoderSpec, TrainingSpec
from augsbert_ray.training.ray_fit import fit_on_ray, report_final_model, report_finished_fit, warn_bf16_on_cpu, worker_setup
from augsbert_ray.training.reranker import encoder_fields, read_columns, require_steps

KNRM_CONFIG = "knrm.json"
KNRM_HEAD = "knrm_head.safetensors"
# the paper's 11 kernels: exact match (mu 1, sigma 1e-3), then mu 0.9, 0.7, ..., -0.9 with sigma 0.1
KERNEL_MUS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)
KERNEL_SIGMAS = (1e-3,) + (0.1,) * 10


class KNRM(nn.Module):
    """Kernel pooling over the cosine matrix of a transformer's query and document token embeddings, then a linear
    layer: ``score = w . sum_q log(sum_d K_k(cos(q, d))) * 0.01 + b``.

    Args:
        encoder: A ``transformers.AutoModel``.
        tokenizer: Its tokenizer.
        mus: The kernels' centres.
        sigmas: Their widths.
        max_length: Tokens kept of a query or document.

    Example:
        >>> knrm = KNRM.from_encoder(str(build_tiny_bert(Path("/tmp/tiny"))))  # doctest: +SKIP
        >>> knrm.score(["is tea healthy"], ["Tea has antioxidants."]).shape  # doctest: +SKIP
        (1,)
    """

    def __init__(self, encoder: Any, tokenizer: Any, mus: tuple[float, ...] = KERNEL_MUS,
                 sigmas: tuple[float, ...] = KERNEL_SIGMAS, max_length: int = 128) -> None:
        super().__init__()
        if len(mus) != len(sigmas):
            raise ValueError(f"{len(mus)} kernel centres but {len(sigmas)} widths")
        self.encoder, self.tokenizer, self.max_length = encoder, tokenizer, max_length
        self.register_buffer("mus", torch.tensor(mus, dtype=torch.float32), persistent=False)
        self.register_buffer("sigmas", torch.tensor(sigmas, dtype=torch.float32), persistent=False)
        self.dense = nn.Linear(len(mus), 1)

    @classmethod
    def from_encoder(cls, model: str, max_length: int = 128, mus: tuple[float, ...] = KERNEL_MUS,
                     sigmas: tuple[float, ...] = KERNEL_SIGMAS) -> KNRM:
        """A KNRM with a fresh linear layer over a saved transformer (a sentence-transformers directory too)."""
        from transformers import AutoModel, AutoTokenizer

        return cls(AutoModel.from_pretrained(model), AutoTokenizer.from_pretrained(model), mus, sigmas, max_length)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> KNRM:
        """A KNRM saved by ``save_pretrained``."""
        from safetensors.torch import load_file

        settings = json.loads((Path(directory) / KNRM_CONFIG).read_text(encoding="utf-8"))
        knrm = cls.from_encoder(str(directory), settings["max_length"], tuple(settings["mus"]), tuple(settings["sigmas"]))
        knrm.dense.load_state_dict(load_file(str(Path(directory) / KNRM_HEAD)))
        return knrm.eval()

    def save_pretrained(self, directory: str | Path) -> None:
        """The encoder and tokenizer as a transformers directory (it loads with ``AutoModel`` too), the kernels in
        ``knrm.json`` and the linear layer in ``knrm_head.safetensors``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        self.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        settings = {"mus": self.mus.tolist(), "sigmas": self.sigmas.tolist(), "max_length": self.max_length}
        (directory / KNRM_CONFIG).write_text(json.dumps(settings), encoding="utf-8")
        save_file({key: value.detach().cpu().contiguous() for key, value in self.dense.state_dict().items()}, str(directory / KNRM_HEAD))

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """The encoder's inputs, and ``match_mask``: the tokens that take part in matching."""
        features = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                  return_special_tokens_mask=True, return_tensors="pt")
        # [CLS] and [SEP] are in every text: their matches would add the same count to every document
        features["match_mask"] = features["attention_mask"] * (1 - features.pop("special_tokens_mask"))
        return dict(features)

    def embed(self, features: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {key: value for key, value in features.items() if key != "match_mask"}
        tokens = self.encoder(**inputs).last_hidden_state
        return nn.functional.normalize(tokens.float(), dim=-1), features["match_mask"].float()

    def forward(self, query_features: dict[str, torch.Tensor], doc_features: dict[str, torch.Tensor]) -> torch.Tensor:
        """One score per (query, document) row of the two tokenized batches."""
        query, query_mask = self.embed(query_features)
        doc, doc_mask = self.embed(doc_features)
        cosine = torch.einsum("bqh,bdh->bqd", query, doc).unsqueeze(-1)  # (batch, query tokens, doc tokens, 1)
        kernels = torch.exp(-((cosine - self.mus) ** 2) / (2 * self.sigmas**2)) * doc_mask[:, None, :, None]
        # log of each query token's soft match count, scaled by 0.01 as the paper's code does, summed over the query
        soft_tf = torch.log(torch.clamp(kernels.sum(dim=2), min=1e-10)) * 0.01 * query_mask[..., None]
        return self.dense(soft_tf.sum(dim=1)).squeeze(-1)

    @torch.inference_mode()
    def score(self, queries: list[str], docs: list[str], batch_size: int = 32) -> np.ndarray:
        """The score of each (queries[i], docs[i]), float32."""
        if len(queries) != len(docs):
            raise ValueError(f"{len(queries)} queries but {len(docs)} documents")
        device = next(self.parameters()).device
        scores = []
        for start in range(0, len(queries), batch_size):
            batch = [{key: value.to(device) for key, value in self.tokenize(texts[start:start + batch_size]).items()}
                     for texts in (queries, docs)]
            scores.append(self(*batch).float().cpu().numpy())
        return np.concatenate(scores) if scores else np.zeros(0, np.float32)


def pairwise_loss(positive: torch.Tensor, negative: torch.Tensor, loss: Literal["hinge", "cross_entropy"]) -> torch.Tensor:
    """KNRM's pairwise hinge (margin 1) or softmax cross-entropy over (positive, negative)."""
    if loss == "hinge":
        return torch.relu(1 - positive + negative).mean()
    return nn.functional.cross_entropy(torch.stack([positive, negative], dim=1), torch.zeros_like(positive, dtype=torch.long))


def knrm_train_loop(config: dict[str, Any]) -> None:
    worker_setup(config)
    warn_bf16_on_cpu(config)
    if report_finished_fit(config["name"]):
        return
    import ray.train
    import ray.train.torch
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    started = time.monotonic()
    spec = EncoderSpec.model_validate(config["spec"])
    [(path, _)] = config["train_files"]
    rows = read_columns(path, ["query", "positive", "negative"]).to_pylist()
    model = KNRM.from_encoder(config["model"], spec.max_seq_length)
    device = ray.train.torch.get_device()
    # a BERT's pooler gets no gradient here: DDP must be told
    ddp_model = ray.train.torch.prepare_model(model, parallel_strategy_kwargs={"find_unused_parameters": True})

    def collate(batch: list[dict[str, str]]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        # positives and negatives in one forward: DDP syncs gradients once per forward
        queries = [row["query"] for row in batch]
        return model.tokenize(queries * 2), model.tokenize([row["positive"] for row in batch] + [row["negative"] for row in batch])

    loader = DataLoader(rows, batch_size=spec.batch_size, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(config["seed"]))
    loader = ray.train.torch.prepare_data_loader(loader, move_to_device=False)
    # the new linear layer learns at its own, higher rate; the encoder at the spec's
    optimizer = torch.optim.AdamW([
        {"params": model.encoder.parameters(), "lr": spec.learning_rate},
        {"params": model.dense.parameters(), "lr": config["head_learning_rate"]},
    ])
    total = spec.epochs * len(loader)
    if not total:
        raise ValueError(f"training {config['name']}: no rows in {path}")
    schedule = get_linear_schedule_with_warmup(optimizer, int(spec.warmup_ratio * total), total)
    epoch_losses = []
    for epoch in range(spec.epochs):
        if hasattr(loader.sampler, "set_epoch"):  # DistributedSampler: a new order each epoch
            loader.sampler.set_epoch(epoch)
        ddp_model.train()
        losses = []
        for query_features, doc_features in loader:
            query_features = {key: value.to(device) for key, value in query_features.items()}
            doc_features = {key: value.to(device) for key, value in doc_features.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config["bf16"]):
                positive, negative = ddp_model(query_features, doc_features).float().chunk(2)
            loss = pairwise_loss(positive, negative, config["loss"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        epoch_losses.append(float(np.mean(losses)))
        if ray.train.get_context().get_world_rank() == 0:
            print(f"fit {config['name']}: epoch {epoch + 1}/{spec.epochs}, loss {epoch_losses[-1]:.4f}", flush=True)
    model.eval()
    metrics = {"train_loss": float(np.mean(epoch_losses)), "epoch_losses": epoch_losses, "train_rows": len(rows),
               "steps": total, "train_seconds": round(time.monotonic() - started, 2), "resumed_from_step": 0}
    report_final_model(model, metrics, config["in_process_model_dir"])


def fit_knrm(
    spec: EncoderSpec,
    model: str,
    train_file: Path,
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    model_dir: Path,
    name: str = "knrm",
    loss: Literal["hinge", "cross_entropy"] = "hinge",
    head_learning_rate: float = 1e-3,
) -> dict[str, Any]:
    """Train KNRM (the encoder fine-tuned with the kernels' linear layer) on gold triplets on Ray Train, and save it
    into ``model_dir`` (``KNRM.from_pretrained`` loads it). Only the final model is kept: a fit stopped midway
    starts over (``resources.checkpoint_every`` is not used).

    Args:
        spec: Epochs, batch size, the encoder's learning rate, warm-up, max sequence length.
        model: The encoder's directory or Hugging Face id: a transformer, or a sentence-transformers student.
        train_file: ``query``, ``positive``, ``negative`` (``triplet_file`` of ``prepare_gold_files``).
        resources: Ray Train's workers, CPUs, GPU use and bf16.
        seed: Seeds the linear layer and the data order.
        storage: Ray Train's storage.
        model_dir: Where the trained KNRM is saved.
        name: The fit's name in ``storage`` and in logs.
        loss: ``hinge`` (the paper's, margin 1) or ``cross_entropy`` over (positive, negative).
        head_learning_rate: The linear layer's learning rate.

    Returns:
        ``train_loss``, ``epoch_losses`` (each epoch's mean), ``train_rows``, ``steps`` and ``train_seconds``.

    Example:
        ::

            fit_knrm(EncoderSpec(epochs=2), "models/student_margin_mse", mined.triplet_file, TrainingSpec(), seed=42,
                     storage=Path("ray_train"), model_dir=Path("models/knrm"))
            KNRM.from_pretrained("models/knrm").score(queries, documents)
    """
    config = {"spec": encoder_fields(spec), "model": model, "train_files": [(str(train_file), "triplets")], "seed": seed,
              "loss": loss, "head_learning_rate": head_learning_rate}
    return require_steps(fit_on_ray(knrm_train_loop, config, resources, storage, name, model_dir), name, train_file, model_dir)

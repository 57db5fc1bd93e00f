"""The model inside a labeling actor: a sentence-transformers CrossEncoder run by torch (fp32, or bf16/fp16
autocast), or its ONNX export quantized to int8 and run by ONNX Runtime (CPU).

int8 uses ONNX Runtime dynamic quantization with per-channel weights: on this project's CPU it tied with
torch's dynamic quantization on speed and was much closer to fp32 (see docs/BENCHMARKS.md). The FFN output
projections stay fp32: their inputs carry the activation outliers that per-tensor int8 activations handle
worst (Bondarenko et al., 2021).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import numpy as np

from augsbert_ray.runtime import configure_torch_threads

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class PairModel:
    """Scores padded batches of token ids. One per actor; loaded once."""

    def __init__(self, model: str, precision: str, threads: int, max_seq_length: int | None, cache_dir: Path | None) -> None:
        configure_torch_threads(threads)
        import torch
        from sentence_transformers import CrossEncoder

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if precision == "fp16" and self.device == "cpu":
            raise ValueError("--precision fp16 needs a GPU actor (--gpus-per-actor)")
        if precision == "int8" and self.device == "cuda":
            raise ValueError("--precision int8 runs on CPU actors; use bf16 or fp16 on GPU")
        self.cross_encoder = CrossEncoder(model, device=self.device, max_length=max_seq_length)
        self.cross_encoder.eval()
        self.tokenizer = self.cross_encoder.tokenizer
        self.max_length = max_seq_length or self.cross_encoder.max_length or self.tokenizer.model_max_length
        self.activation = self.cross_encoder.activation_fn
        self.precision = precision
        self.input_names = [name for name in ONNX_INPUTS if name in self.tokenizer.model_input_names]
        self.session = None
        if precision == "int8":
            self.session = _int8_session(self.cross_encoder, model, self.input_names, threads, cache_dir)

    def score(self, features: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        if self.session is not None:
            logits = torch.from_numpy(self.session.run(None, {name: features[name] for name in self.input_names})[0])
        else:
            tensors = {name: torch.from_numpy(features[name]).to(self.device) for name in self.input_names}
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
            autocast = torch.autocast(self.device, dtype=dtype) if dtype else contextlib.nullcontext()
            with torch.inference_mode(), autocast:
                logits = self.cross_encoder(tensors)["scores"]
        logits = logits.float()
        with torch.inference_mode():
            scores = self.activation(logits) if self.activation is not None else logits
        return scores.reshape(len(scores), -1)[:, 0].cpu().numpy().astype(np.float32)


def _int8_session(cross_encoder, model: str, input_names: list[str], threads: int, cache_dir: Path | None):
    """Export to ONNX and quantize once per model (cached by weights fingerprint); open an ORT session."""
    import onnxruntime as ort

    from augsbert_ray.models import model_fingerprint

    cache = (cache_dir or Path(model) / ".onnx") / model_fingerprint(model).replace("/", "_")
    quantized = cache / "model.int8.onnx"
    if not quantized.exists():
        _export_int8(cross_encoder, input_names, quantized)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(quantized), options, providers=["CPUExecutionProvider"])


def _export_int8(cross_encoder, input_names: list[str], target: Path) -> None:
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{uuid.uuid4().hex}"  # actors may export at once: each writes its own, rename wins
    tmp.mkdir()
    hf_model = cross_encoder[0].auto_model.eval()
    example = cross_encoder.tokenizer(["a b c"], ["d e"], return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in input_names}
    with torch.inference_mode():
        torch.onnx.export(
            hf_model, (), str(tmp / "model.onnx"), kwargs={name: example[name] for name in input_names},
            input_names=input_names, output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
            dynamo=False, opset_version=17,
        )
    graph = onnx.load(str(tmp / "model.onnx")).graph
    ffn_out = [node.name for node in graph.node if node.op_type == "MatMul" and "/output/dense" in node.name and "attention" not in node.name]
    quantize_dynamic(tmp / "model.onnx", tmp / "model.int8.onnx", weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=ffn_out)
    os.replace(tmp / "model.int8.onnx", target)
    for leftover in tmp.iterdir():
        leftover.unlink()
    tmp.rmdir()

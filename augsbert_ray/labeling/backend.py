"""The model inside a labeling actor: a sentence-transformers CrossEncoder run by torch (fp32, or bf16/fp16
autocast), or its ONNX export run by ONNX Runtime on CPU, at fp32 or quantized to int8.

ONNX Runtime is the CPU default (runtime "auto"): on this project's 2-core CPU its fp32 session scored MiniLM
pairs about twice as fast as torch eager, with scores equal to 1e-7 (docs/BENCHMARKS.md). int8 uses ONNX
Runtime dynamic quantization with per-channel weights: it tied with torch's dynamic quantization on speed and
was much closer to fp32. The FFN output projections stay fp32: their inputs carry the activation outliers that
per-tensor int8 activations handle worst (Bondarenko et al., 2021).
"""

from __future__ import annotations

import contextlib
import os
import uuid
import warnings
from pathlib import Path

import numpy as np

from augsbert_ray.runtime import configure_torch_threads

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class PairModel:
    """Scores padded batches of token ids. One per actor; loaded once."""

    def __init__(
        self, model: str, precision: str, threads: int, max_seq_length: int | None, cache_dir: Path | None, runtime: str = "auto"
    ) -> None:
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
        use_onnx = runtime == "onnx" or (runtime == "auto" and self.device == "cpu" and precision in ("fp32", "int8"))
        if precision == "int8" and not use_onnx:
            raise ValueError("--precision int8 runs on ONNX Runtime: use --runtime onnx or auto")
        self.session = None
        if use_onnx:
            self.session = _onnx_session(self.cross_encoder, model, self.input_names, threads, cache_dir, precision == "int8")

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


def _onnx_session(cross_encoder, model: str, input_names: list[str], threads: int, cache_dir: Path | None, int8: bool):
    """Export to ONNX (and quantize) once per model, cached by weights fingerprint; open an ORT session."""
    import onnxruntime as ort

    from augsbert_ray.models import model_fingerprint

    cache = (cache_dir or Path(model) / ".onnx") / model_fingerprint(model).replace("/", "_")
    exported = cache / "model.onnx"
    if not exported.exists():
        _export(cross_encoder, input_names, exported)
    path = exported
    if int8:
        path = cache / "model.int8.onnx"
        if not path.exists():
            _quantize(exported, path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _export(cross_encoder, input_names: list[str], target: Path) -> None:
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{uuid.uuid4().hex}.onnx")  # actors may export at once: each writes its own, rename wins
    hf_model = cross_encoder[0].auto_model.eval()
    example = cross_encoder.tokenizer(["a b c"], ["d e"], return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in input_names}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent branches: the axes are declared dynamic
        torch.onnx.export(
            hf_model, (), str(tmp), kwargs={name: example[name] for name in input_names},
            input_names=input_names, output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
            dynamo=False, opset_version=17,
        )
    os.replace(tmp, target)


def _quantize(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = target.with_name(f".{uuid.uuid4().hex}.onnx")
    graph = onnx.load(str(source)).graph
    ffn_out = [node.name for node in graph.node if node.op_type == "MatMul" and "/output/dense" in node.name and "attention" not in node.name]
    quantize_dynamic(source, tmp, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=ffn_out)
    os.replace(tmp, target)

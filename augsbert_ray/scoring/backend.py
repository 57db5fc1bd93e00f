"""The models inside a labeling actor: a sentence-transformers CrossEncoder run by torch (fp32; bf16/fp16 as
half-precision weights), or its ONNX export run by ONNX Runtime on CPU, at fp32 or
quantized to int8; and a bi-encoder (SentenceTransformer) run by torch, which scores a pair by the cosine of its two
embeddings.

On a GPU an actor tokenizes with every CPU it reserved: one tokenizer thread gives about 11k MiniLM pairs/s, where an
H200 scores about 50k (docs/BENCHMARKS.md, "The GPU path"). CPU actors keep one tokenizer thread, since their
threads run the model.

ONNX Runtime is the CPU default (runtime "auto"): on this project's 2-core CPU its fp32 session scored MiniLM
pairs about twice as fast as torch eager, with scores equal to 1e-7 (docs/BENCHMARKS.md). int8 uses ONNX
Runtime dynamic quantization with per-channel weights: it tied with torch's dynamic quantization on speed and
was much closer to fp32. Per-tensor int8 activations lose the most on BERT's outlier channels (Bondarenko et
al., 2021), so before quantizing, each linear layer's input channels are smoothed (SmoothQuant, Xiao et al.,
2023) with activation maxima measured on calibration pairs from the job's input, and the FFN output
projections, whose inputs carry the largest outliers, stay fp32.

The export is this module's own rather than sentence-transformers' ``CrossEncoder(backend="onnx")`` and
``export_dynamic_quantized_onnx_model``: those need optimum-onnx, whose only release (0.1.0) requires
transformers < 4.58 while sentence-transformers 6.2 requires transformers >= 5 (huggingface/optimum-onnx#114), so
they cannot run beside this stack; bench/label_throughput.py tries them and prints why.
"""

from __future__ import annotations

import copy
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.files import atomic_path
from augsbert_ray.runtime import configure_torch_threads, gpu_unseen, warn_cpu_bf16

ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CALIBRATION_PAIRS = 256  # int8: pairs whose activations set the smoothing scales
SMOOTHING_ALPHA = 0.8  # how much of an input channel's range moves into the weights (SmoothQuant's alpha)


def use_tokenizer_threads(device: str, threads: int) -> None:
    """A GPU actor tokenizes on the ``threads`` CPUs it reserved; a CPU actor on one (its threads run the model)."""
    if device == "cuda":
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        os.environ["RAYON_NUM_THREADS"] = str(max(1, threads))  # read once, at the tokenizer's first batch


def weights_dtype(precision: str) -> Any:
    """The dtype a torch model's weights are cast to: bf16/fp16 (None: fp32). Half-precision weights rather than
    autocast on CPU too: autocast casts the fp32 weights at every operation, and on a 2-core Zen 4 CPU bf16 weights
    scored 1.1-1.35x as many mpnet cross-encoder pairs per second as autocast, with Spearman 0.9997-0.9998 against
    fp32 (docs/BENCHMARKS.md)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def actor_device(precision: str, threads: int, gpu: bool) -> tuple[str, Any]:
    """A labeling actor's device ('cuda' where it reserved a GPU, ``gpu``: an error if it sees none) and weights dtype
    (weights_dtype), with its tokenizer's threads set for that device; bf16 on a CPU without bf16 instructions logs
    a warning naming the node. A labeler without a GPU runs on the CPU though the process sees one (labeling in
    the driver, ``labels_in_process``): its precision and runtime were checked for the CPU."""
    import torch

    if gpu and (unseen := gpu_unseen("a labeling actor", "labeling.gpus_per_actor: 0")):  # it would label on the CPU, fp16 and all
        raise RuntimeError(unseen)
    device = "cuda" if gpu else "cpu"
    use_tokenizer_threads(device, threads)
    dtype = weights_dtype(precision)
    if device == "cpu" and dtype is torch.bfloat16:
        warn_cpu_bf16("a labeling actor")
    return device, dtype


def check_max_length(model: str, max_seq_length: int | None, tokenizer: Any, config: Any) -> None:
    """A set max_seq_length must hold a pair's special tokens and fit the model's position embeddings: past them the
    model fails at the first long pair, hours into a job; below them nothing would be truncated."""
    if max_seq_length is None:
        return
    special = tokenizer.num_special_tokens_to_add(pair=True)
    # RoBERTa-like configs count two positions the tokenizer's limit leaves out (its model_max_length: 512 of 514)
    limits = [getattr(config, "max_position_embeddings", None), tokenizer.model_max_length]
    positions = min(limit for limit in limits if limit is not None and limit < 1_000_000)
    if max_seq_length <= special:
        raise ValueError(f"max_seq_length {max_seq_length}: a pair takes {special} special tokens before any word")
    if max_seq_length > positions:
        raise ValueError(f"max_seq_length {max_seq_length}: {model} takes at most {positions} tokens")


class PairModel:
    """Scores padded batches of token ids. One per actor; loaded once."""

    def __init__(
        self, model: str, precision: str, threads: int, max_seq_length: int | None, cache_dir: Path | None, runtime: str = "auto",
        calibration_pairs: list[tuple[str, str]] | None = None, gpu: bool = False,
    ) -> None:
        configure_torch_threads(threads)
        from sentence_transformers import CrossEncoder

        # LabelingSpec has checked the precision against the runtime and the actor's device
        self.device, dtype = actor_device(precision, threads, gpu)
        self.cross_encoder = CrossEncoder(model, device=self.device, max_length=max_seq_length)
        if dtype is not None:
            self.cross_encoder.to(dtype)
        self.cross_encoder.eval()
        self.tokenizer = self.cross_encoder.tokenizer
        self.max_length = max_seq_length or self.cross_encoder.max_seq_length or self.tokenizer.model_max_length
        self.activation = self.cross_encoder.activation_fn
        self.input_names = [name for name in ONNX_INPUTS if name in self.tokenizer.model_input_names]
        # a GPU at bf16/fp16 runs each batch width slowly the first time it meets it: widths rounded up to a multiple
        # of 8 (9 widths instead of 39 on 20k STSb pairs) scored 3.1x faster on first meeting, 1.4x after (H200);
        # fp32 lost 6-11% to the extra padding
        self.width_multiple = 8 if dtype is not None and self.device == "cuda" else 1
        use_onnx = runtime == "onnx" or (runtime == "auto" and self.device == "cpu" and precision in ("fp32", "int8"))
        self.session = None
        if use_onnx:
            if precision == "int8" and not calibration_pairs:
                raise ValueError("--precision int8 calibrates on the input's first pairs, and it has no pair with two sentences")
            self.session = _onnx_session(self, model, threads, cache_dir, calibration_pairs if precision == "int8" else None)

    def score(self, features: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        if self.session is not None:
            logits = torch.from_numpy(self.session.run(None, {name: features[name] for name in self.input_names})[0])
        else:
            tensors = {name: torch.from_numpy(features[name]).to(self.device) for name in self.input_names}
            with torch.inference_mode():
                logits = self.cross_encoder(tensors)["scores"]
        logits = logits.float()
        with torch.inference_mode():
            scores = self.activation(logits) if self.activation is not None else logits
        return scores.reshape(len(scores), -1)[:, 0].cpu().numpy().astype(np.float32)


class EmbeddingModel:
    """Scores pairs of sentences by the cosine of their bi-encoder embeddings. One per actor; loaded once."""

    def __init__(self, model: str, precision: str, threads: int, max_seq_length: int | None, gpu: bool = False) -> None:
        configure_torch_threads(threads)
        from sentence_transformers import SentenceTransformer

        # LabelingSpec and LabelJob have checked the precision against the device and the teacher
        self.device, dtype = actor_device(precision, threads, gpu)
        self.encoder = SentenceTransformer(model, device=self.device)
        if dtype is not None:
            self.encoder.to(dtype)
        if max_seq_length:
            self.encoder.max_seq_length = max_seq_length
        self.tokenizer = self.encoder.tokenizer
        self.max_length = self.encoder.max_seq_length

    @classmethod
    def wrap(cls, encoder: Any) -> EmbeddingModel:
        """A SentenceTransformer already in memory (a fit's model), on its own device and dtype."""
        model = cls.__new__(cls)
        model.encoder, model.device = encoder, str(encoder.device)
        model.tokenizer, model.max_length = encoder.tokenizer, encoder.max_seq_length
        return model

    def embed(self, sentences: list[str], batch_size: int) -> np.ndarray:
        """Unit-length float32 embeddings, one row per sentence."""
        import torch

        with torch.inference_mode():
            embeddings = self.encoder.encode(sentences, batch_size=batch_size, normalize_embeddings=True,
                                             convert_to_numpy=True, show_progress_bar=False)
        return embeddings.astype(np.float32)


def _onnx_session(pair_model: PairModel, model: str, threads: int, cache_dir: Path | None, calibration_pairs: list[tuple[str, str]] | None):
    """Export to ONNX once per model, cached by its weights' and configs' fingerprints, or with calibration pairs,
    its smoothed int8 version (cached beside it: the first calibration wins); open an ORT session."""
    import onnxruntime as ort

    from augsbert_ray.models import model_fingerprint, model_settings_digest

    name = "-".join(filter(None, (model_fingerprint(model), model_settings_digest(model))))
    cache = (cache_dir or Path(model) / ".onnx") / name.replace("/", "_")
    if calibration_pairs is None:
        path = cache / "model.onnx"
        if not path.exists():
            _export(pair_model.cross_encoder, pair_model.input_names, path)
    else:
        path = cache / "model.int8.onnx"
        if not path.exists():
            smoothed = cache / f".smoothed.{uuid.uuid4().hex}.onnx"
            _export(_smoothed(pair_model, calibration_pairs), pair_model.input_names, smoothed)
            _quantize(smoothed, path)
            smoothed.unlink()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _export(cross_encoder, input_names: list[str], target: Path) -> None:
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    hf_model = cross_encoder[0].auto_model.eval()
    example = cross_encoder.tokenizer(["a b c"], ["d e"], return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in input_names}
    # actors may export at once: each writes its own temporary file, and the last rename wins
    with atomic_path(target) as tmp, torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent branches: the axes are declared dynamic
        torch.onnx.export(
            hf_model, (), str(tmp), kwargs={name: example[name] for name in input_names},
            input_names=input_names, output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
            dynamo=False, opset_version=17,
        )


def _is_ffn_output(name: str) -> bool:
    """The FFN's output projection, by module name or by ONNX node name: it stays fp32."""
    return "output.dense" in name.replace("/", ".") and "attention" not in name


def _smoothed(pair_model: PairModel, calibration_pairs: list[tuple[str, str]]):
    """A copy of the cross-encoder whose encoder linears (but the FFN outputs, left fp32) take smoothed
    inputs: s = max|x|^alpha / max|w|^(1 - alpha) per input channel, x measured on the calibration pairs."""
    import torch

    class Smoothed(torch.nn.Module):
        """``linear(x / s)`` with the weight's input columns times ``s``: the same function, whose input has its
        outlier channels divided down before int8 quantizes it per tensor."""

        def __init__(self, linear: torch.nn.Linear, scale: torch.Tensor) -> None:
            super().__init__()
            self.linear = linear
            self.register_buffer("inverse_scale", 1.0 / scale)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x * self.inverse_scale)

    cross_encoder = copy.deepcopy(pair_model.cross_encoder)
    encoder = cross_encoder[0].auto_model
    linears = {name: module for name, module in encoder.named_modules()
               if isinstance(module, torch.nn.Linear) and ".layer." in f".{name}" and not _is_ffn_output(name)}
    input_max: dict[str, torch.Tensor] = {}

    def record(name: str):
        def hook(module, inputs, output) -> None:
            channel_max = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
            input_max[name] = torch.maximum(input_max[name], channel_max) if name in input_max else channel_max
        return hook

    hooks = [module.register_forward_hook(record(name)) for name, module in linears.items()]
    with torch.inference_mode():
        for start in range(0, len(calibration_pairs), 64):
            batch = calibration_pairs[start : start + 64]
            features = pair_model.tokenizer([a for a, _ in batch], [b for _, b in batch], padding=True, truncation="longest_first",
                                            max_length=pair_model.max_length, return_tensors="pt")
            encoder(**{name: features[name] for name in pair_model.input_names})
    for hook in hooks:
        hook.remove()
    for name, linear in linears.items():
        weight_max = linear.weight.detach().abs().amax(0).clamp(min=1e-5)
        scale = input_max[name].clamp(min=1e-5) ** SMOOTHING_ALPHA / weight_max ** (1 - SMOOTHING_ALPHA)
        linear.weight.data *= scale
        parent, _, attribute = name.rpartition(".")
        setattr(encoder.get_submodule(parent), attribute, Smoothed(linear, scale))
    return cross_encoder


def _quantize(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source)).graph
    ffn_out = [node.name for node in graph.node if node.op_type == "MatMul" and _is_ffn_output(node.name)]
    with atomic_path(target) as tmp:
        quantize_dynamic(source, tmp, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=ffn_out)

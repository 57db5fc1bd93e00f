"""bf16 against fp32 on this machine's CPU: one training step of a cross-encoder under bf16 autocast (as
``training.bf16``) and one scoring call with bf16 weights (as ``labeling.precision: bf16`` on torch), each against
fp32, interleaved so that both meet the same machine load. It prints whether the CPU has bf16 instructions
(``augsbert_ray.runtime.cpu_has_bf16``: AVX512-BF16 or AMX), which decides whether `augsbert run` and `augsbert
label` accept bf16 on CPU.

    .venv/bin/python -m bench.cpu_bf16 --model mpnet --repeats 2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from sentence_transformers import CrossEncoder

import augsbert_ray as ar
from augsbert_ray.runtime import configure_torch_threads, cpu_has_bf16

FIRST = "A man is playing a guitar on the stage tonight while the crowd sings along."
SECOND = "Someone plays an instrument in front of a large group of people."


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text(encoding="utf-8").splitlines() if cpuinfo.is_file() else ():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mpnet", help="base model of the cross-encoder (default: %(default)s)")
    parser.add_argument("--train-batch", type=int, default=16, help="pairs per training step (default: %(default)s)")
    parser.add_argument("--score-batch", type=int, default=64, help="pairs per scoring call (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    configure_torch_threads(args.threads)

    cross_encoder = CrossEncoder(ar.resolve_model(args.model), num_labels=1)
    model, tokenizer = cross_encoder.model, cross_encoder.tokenizer

    def batch(size: int) -> dict:
        return tokenizer([FIRST] * size, [SECOND] * size, padding=True, return_tensors="pt")

    train, score = batch(args.train_batch), batch(args.score_batch)

    def train_step(bf16: bool) -> float:  # seconds
        model.train().float()
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**train).logits.float().mean()
        loss.backward()
        model.zero_grad()
        return time.perf_counter() - started

    def score_call(bf16: bool) -> float:  # seconds, the weights already cast
        model.eval().to(torch.bfloat16 if bf16 else torch.float32)
        started = time.perf_counter()
        with torch.inference_mode():
            model(**score)
        return time.perf_counter() - started

    seconds: dict[str, list[float]] = {name: [] for name in ("train_fp32", "train_bf16", "score_fp32", "score_bf16")}
    for bf16 in (False, True):  # warm-up
        train_step(bf16)
        score_call(bf16)
    for _ in range(args.repeats):
        for bf16 in (False, True):
            precision = "bf16" if bf16 else "fp32"
            seconds[f"train_{precision}"].append(train_step(bf16))
            seconds[f"score_{precision}"].append(score_call(bf16))
    best = {name: min(values) for name, values in seconds.items()}
    print(json.dumps({
        "cpu": cpu_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_has_bf16": cpu_has_bf16(), "model": args.model, "threads": args.threads, "tokens": int(train["input_ids"].shape[1]),
        "seconds": {name: [round(value, 2) for value in values] for name, values in seconds.items()},
        "bf16_over_fp32": {"train_step": round(best["train_bf16"] / best["train_fp32"], 2),
                           "score_call": round(best["score_bf16"] / best["score_fp32"], 2)},
    }, indent=1))


if __name__ == "__main__":
    main()

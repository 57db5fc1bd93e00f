"""Internal: torch in this process, its threads, and whether its CPU or GPU can do the work asked."""

from __future__ import annotations

import os
import socket

from augsbert_ray.config import SpecError
from augsbert_ray.runtime.console import log


def configure_torch_threads(threads: int) -> None:
    """Ray sets OMP_NUM_THREADS=1 in workers; without this, CPU inference runs on one thread."""
    import torch

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(max(1, threads))


def cpu_has_bf16() -> bool:
    """Whether this machine's x86 CPU has bf16 instructions (AVX512-BF16 or AMX). Without them torch runs bf16 many
    times slower than fp32 (bench/cpu_bf16.py: on a 2-core AVX2 AMD EPYC, 45 times for a training step of the mpnet
    cross-encoder under bf16 autocast, 8 times for scoring with bf16 weights). Other CPUs (ARM, with its own bf16
    extension) are not judged: True."""
    import platform

    import torch

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def check_cpu_bf16(address: str | None, asked: dict[str, bool]) -> None:
    """Stop before Ray starts when work on this machine's CPU asks for bf16 that the CPU lacks. ``asked`` maps each
    setting's name to whether it asks for bf16 on a CPU; an ``address`` (cluster_address) means the work runs on
    another machine's CPUs, which are not checked."""
    from augsbert_ray import runtime  # cpu_has_bf16 as the package holds it: callers (and tests) replace it there

    names = [name for name, on in asked.items() if on]
    if names and address is None and not runtime.cpu_has_bf16():
        raise SpecError(f"{' and '.join(names)}: this CPU has no bf16 instructions (AVX512-BF16 or AMX), where bf16 runs "
                        "8-45 times slower than fp32; use fp32 here, or bf16 on a GPU")


def warn_cpu_bf16(work: str) -> None:
    """What check_cpu_bf16 cannot see from the driver (a cluster's nodes): ``work`` running bf16 on this node's CPU,
    where it has no bf16 instructions, logs a warning naming the node."""
    from augsbert_ray import runtime  # cpu_has_bf16 as the package holds it: callers (and tests) replace it there

    if not runtime.cpu_has_bf16():
        log.warning("%s runs bf16 on the CPU of %s, which has no bf16 instructions (AVX512-BF16 or AMX): 8-45 times "
                    "slower than fp32 there", work, socket.gethostname())


def gpu_unseen(worker: str, setting: str) -> str | None:
    """The error for ``worker`` (e.g. "a labeling actor"), which reserved a GPU, when this process's torch sees none
    (a CPU build, or no CUDA driver): it would otherwise hold the GPU and work on the CPU, or fail inside NCCL's
    set-up without saying why. None where torch sees one. ``setting`` turns the GPU off."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"{worker} on {socket.gethostname()} reserved a GPU, but torch {torch.__version__} there sees none (a CPU "
            f"build, or no CUDA driver): install a CUDA build of torch on the GPU nodes, or set {setting}")

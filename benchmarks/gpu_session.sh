#!/usr/bin/env bash
# A GPU window spent on one prepared script (docs/performance.md, "A GPU window: pack, run, merge"). Run from the
# repository root; posenc need not be installed (PYTHONPATH=src).
#
#   bash benchmarks/gpu_session.sh window [MINUTES]     here: the seconds a queue cell has under all / queue MINUTES
#   bash benchmarks/gpu_session.sh pack [DIR]           here, beforehand: the queue's prepared data into DIR (.device)
#   bash benchmarks/gpu_session.sh all OUT [MINUTES]    on the GPU: the whole session under one deadline (default 12)
#   bash benchmarks/gpu_session.sh queue OUT [MINUTES]  on the GPU: only the queue's grid cells and their archive
#   bash benchmarks/gpu_session.sh tests|lm_nan|loop|bench|peers OUT   one measurement each, each with its own limit
#
# `all` prints one summary line per step (also OUT/summary.txt, repeated at the end): 1 the environment, an import
# check of posenc and any missing Python package; 2 the CUDA tests, each result as it finishes (OUT/cuda_tests.log,
# OUT/cuda_tests.xml; cut at 3 min); 3 the small model's updates/s alone, eager vs train.compile: reduce-overhead
# (OUT/train_loop.json); 4 grid cells from the queue until the deadline (OUT/queue.log); 5 the archive of the finished
# cells (OUT/cells.tar.gz, for `posenc experiment NAME --merge`). OUT/session.log holds the details of 1 and 3.
# Environment: GPU_SESSION_DEVICE (cuda; cpu for the dry run), GPU_SESSION_QUEUE (benchmarks/gpu_queue.yaml),
# GPU_SESSION_PAYLOAD (.device), GPU_SESSION_TESTS (the pytest selection, "-m cuda"), CUDA_TESTS_LIMIT (180 s),
# LOOP_STEPS (200), LOOP_COMPILE (reduce-overhead), LOOP_EXPERIMENT (multi30k_select).
set -u
part=${1:-}; out=${2:-/tmp/posenc-gpu}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
device=${GPU_SESSION_DEVICE:-cuda}
queue=${GPU_SESSION_QUEUE:-benchmarks/gpu_queue.yaml}
payload=${GPU_SESSION_PAYLOAD:-.device}
read -r -a selection <<<"${GPU_SESSION_TESTS:--m cuda}"

step() { local name=$1 limit=$2; shift 2; echo "== $name ($(date +%T))"; timeout "$limit" "$@" >"$out/$name.log" 2>&1; echo "rc=$? $name"; tail -n 25 "$out/$name.log"; }
bench() { python3 -m posenc.bench --device cuda "$@"; }
summary() { echo "$*" | tee -a "$out/summary.txt"; }

# The deadline END (seconds since the epoch) MINUTES from now, and the seconds left before it.
set_deadline() {
  END=$(python3 -c 'import sys, time; print(int(time.time() + float(sys.argv[1]) * 60))' "$1" 2>/dev/null) \
    || { echo "error: MINUTES must be a number, got '$1'" >&2; exit 2; }
}
left() { echo $(( END - $(date +%s) )); }
# Each step's allowance in seconds: its limit, then the grace timeout gives it after SIGINT/SIGTERM. Steps 2 and 3
# get at most their limit and 30 % of the time left (share); the grids the rest, until QUEUE_EARLY s before the
# deadline. QUEUE_START is what `posenc queue run` takes before its first cell can start (imports, the payload
# placed, the grids loaded). `window MINUTES` prints what a cell has when every step uses its whole allowance.
ENV_LIMIT=${GPU_SESSION_ENV_LIMIT:-60}; ENV_GRACE=5
TESTS_WANT=${CUDA_TESTS_LIMIT:-180}; TESTS_GRACE=20
LOOP_WANT=120; LOOP_GRACE=10
QUEUE_EARLY=10; QUEUE_START=30
# A step's limit: WANT seconds, at most 30 % of LEFT seconds (the grids get the rest).
share() { local want=$1 room=$(( $2 * 3 / 10 )); echo $(( room < want ? room : want )); }
limit_of() { share "$1" "$(left)"; }

# The CUDA selection, each result written as it finishes: -v lines teed to OUT/cuda_tests.log; SIGINT at the limit
# lets pytest still write the -rA summary and OUT/cuda_tests.xml; 60 s per test with pytest-timeout, else
# faulthandler's traceback dump after 60 s (it reports a hung test without stopping it).
cuda_tests() {
  local limit=$1 per_test=(--timeout 60)
  python3 -c "import pytest_timeout" 2>/dev/null || { echo "pytest-timeout not installed: faulthandler_timeout only"; per_test=(-o faulthandler_timeout=60); }
  echo "== cuda_tests ($(date +%T), limit ${limit}s)"
  timeout -s INT -k "$TESTS_GRACE" "$limit" python3 -m pytest -v -o addopts="" -rA -p no:cacheprovider "${selection[@]}" \
    "${per_test[@]}" --junitxml="$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log"
  return "${PIPESTATUS[0]}"
}

# Step 1: GPU, driver, torch, CUDA; missing Python packages (pyproject's dependencies and the test tools) in one
# line; posenc's modules imported. Exit status 1 when posenc does not import (or CUDA is asked for and absent).
environment() {
  timeout -k "$ENV_GRACE" "$ENV_LIMIT" python3 - "$device" <<'PY'
import importlib, importlib.metadata as md, re, subprocess, sys
device, parts, failed = sys.argv[1], [], False
try:
    import tomllib
    deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
except Exception:  # noqa: BLE001 - no tomllib: the names by pattern
    deps = re.findall(r'^\s*"([A-Za-z0-9_.-]+)[<>=!~ ]', open("pyproject.toml").read().split("[project.optional")[0], re.M)
missing = []
for dep in [*deps, "pytest", "pytest-timeout"]:
    name = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]
    try:
        md.version(name)
    except md.PackageNotFoundError:
        missing.append(name)
try:
    import torch
    if device == "cuda" and torch.cuda.is_available():
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            smi = []
        name, _, driver = (smi[0] if smi else f"{torch.cuda.get_device_name()}, ?").partition(", ")
        parts.append(f"{name} (driver {driver})")
        parts.append(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    else:
        failed = device == "cuda"
        parts.append(("NO CUDA DEVICE, " if failed else "cpu, ") + f"torch {torch.__version__}")
    for module in ("posenc.cli.main", "posenc.window.queue", "posenc.tasks.translation.task", "posenc.bench"):
        importlib.import_module(module)
    parts.append("posenc imports")
except Exception as err:  # noqa: BLE001 - reported in the one line
    failed = True
    parts.append(f"IMPORT FAILED: {type(err).__name__}: {err}".splitlines()[0])
parts.append("missing Python packages: " + ", ".join(missing) if missing else "no Python package missing")
print("; ".join(parts))
sys.exit(1 if failed else 0)
PY
}

# Step 2's line from the JUnit XML (pass/fail/skip counts), else from the -v log.
test_counts() {
  python3 - "$out/cuda_tests.xml" "$out/cuda_tests.log" <<'PY'
import re, sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
    s = root if root.tag == "testsuite" else root.find("testsuite")
    n, fail, err, skip = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    print(f"{n} tests: {n - fail - err - skip} passed, {fail} failed, {err} errors, {skip} skipped")
except Exception:  # noqa: BLE001 - no XML (killed): count the -v lines
    log = open(sys.argv[2], errors="replace").read()
    counts = {k: len(re.findall(rf" {k}", log)) for k in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    print("no XML; from the log: " + ", ".join(f"{v} {k.lower()}" for k, v in counts.items()))
PY
}

# Step 3's line: each configuration's updates/s and ratio to eager fp32, from the bench's log lines.
loop_line() {
  sed -n 's/^train_loop \([^ ]*\) .* \([0-9.]*\) steps\/s .*×eager-fp32 \([0-9.]*\).*/\1 \2 upd\/s (×\3)/p' "$1" | paste -sd ';' -
}

# Step 5's line: what the archive holds (from its manifest) and what OUT holds (a GPU window returns 8 files at most,
# 16 MiB each).
archive_line() {
  python3 - "$out" <<'PY'
import json, os, sys, tarfile
out = sys.argv[1]
path = os.path.join(out, "cells.tar.gz")
files = sorted(f for f in os.listdir(out) if os.path.isfile(os.path.join(out, f)))
big = [f for f in files if os.path.getsize(os.path.join(out, f)) > 16 * 2**20]
where = f"OUT holds {len(files)} files" + (f", over 16 MiB: {', '.join(big)}" if big else "")
if not os.path.isfile(path):
    print(f"no archive; {where}")
    sys.exit(0)
with tarfile.open(path) as tar:
    grids = json.load(tar.extractfile("manifest.json"))["grids"]
cells = ", ".join(f"{g['name']}: {len(g['cells'])} cells" for g in grids if g["cells"]) or "no finished cell"
print(f"{path} ({os.path.getsize(path) / 2**20:.2f} MiB): {cells}; {where}")
PY
}

session() {  # all OUT [MINUTES]: the five steps under one deadline
  local rc lim line
  set_deadline "${1:-12}"
  : >"$out/summary.txt"; : >"$out/session.log"
  echo "== gpu_session all: deadline $(date -d "@$END" +%T 2>/dev/null || echo "$END") ($(left) s)"
  payload_note
  line=$(environment 2>>"$out/session.log"); rc=$?
  (( rc == 124 || rc == 137 )) && line="no answer within ${ENV_LIMIT}s (torch or posenc did not import in time)"
  echo "$line" >>"$out/session.log"
  summary "[1/5 environment] $line"
  (( rc == 0 )) || { summary "[stop] posenc cannot run here: nothing else is tried"; exit 1; }
  lim=$(limit_of "$TESTS_WANT")
  if (( lim >= 10 )); then
    cuda_tests "$lim"; rc=$?
    summary "[2/5 tests] $(test_counts)$( (( rc == 124 )) && echo "; cut at ${lim}s")"
  else
    summary "[2/5 tests] skipped: ${lim}s of the time left are too little"
  fi
  lim=$(limit_of "$LOOP_WANT")
  if (( lim >= 10 )); then
    echo "== train_loop ($(date +%T), limit ${lim}s)"
    timeout -s INT -k "$LOOP_GRACE" "$lim" python3 -m posenc.bench --device "$device" --loop-only --precision fp32 \
      --compile "${LOOP_COMPILE:-reduce-overhead}" --loop-steps "${LOOP_STEPS:-200}" \
      --loop-experiment "${LOOP_EXPERIMENT:-multi30k_select}" --out "$out/train_loop.json" >>"$out/session.log" 2>&1
    rc=$?
    line=$(loop_line "$out/session.log")
    summary "[3/5 step] ${line:-no figure (exit $rc; see session.log)}$( (( rc == 124 )) && echo "; cut at ${lim}s")"
  else
    summary "[3/5 step] skipped: ${lim}s of the time left are too little"
  fi
  grids "[4/5 grids]"
  summary "[5/5 archive] $(archive_line)"
  echo "== summary"; cat "$out/summary.txt"
}

# Up front, one line when the packed data is not here: the grids would then prepare their data on this machine,
# downloading what the tree lacks, which a lent GPU (no network) cannot.
payload_note() {
  [ -f "$payload/payload.json" ] && return
  summary "[note] no packed data at $payload (no payload.json): the grids prepare their data here, downloading what" \
    "is missing, and a lent GPU has no network; run \`gpu_session.sh pack\` before the window"
}

# Step 4 (or the queue part): the queue's cells until 10 s before the deadline; the runner writes the archive as
# cells finish and once more as it ends (also when SIGINT stops it). The summary line is the queue's last line, or
# its one-line error when it stopped before the session (e.g. packed data that cannot be placed).
grids() {
  local label=$1 lim rc line from=()
  lim=$(( $(left) - 5 ))
  if (( lim < 20 )); then summary "$label skipped: ${lim}s left"; return; fi
  [ -f "$payload/payload.json" ] && from=(--payload "$payload")
  echo "== queue ($(date +%T), until $(( END - QUEUE_EARLY )), ${#from[@]} payload args)"
  timeout -s INT -k 20 "$lim" python3 -m posenc.cli.main queue run "$queue" --until $(( END - QUEUE_EARLY )) \
    --archive "$out/cells.tar.gz" "${from[@]}" 2>&1 | tee "$out/queue.log"
  rc=${PIPESTATUS[0]}
  line=$(grep '^queue:' "$out/queue.log" | tail -n 1)
  [ -n "$line" ] || line=$(grep '^error:' "$out/queue.log" | tail -n 1)
  summary "$label $line$( (( rc != 0 )) && echo " (exit $rc)")"
}

# What a window carries after `pack DIR`: DIR and the files git does not ignore (a lent machine takes 64 MiB).
travels() {
  python3 - "$1" <<'PY'
import os, subprocess, sys
names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.split(b"\0")
tree = sum(os.path.getsize(n) for n in names if n and os.path.isfile(n))
packed = sum(os.path.getsize(os.path.join(top, f)) for top, _, files in os.walk(sys.argv[1]) for f in files)
print(f"travels: {packed / 2**20:.1f} MiB in {sys.argv[1]} + {tree / 2**20:.1f} MiB of the checkout's files = "
      f"{(packed + tree) / 2**20:.1f} MiB (a window carries 64 MiB)")
PY
}

# The seconds a queue cell has under `all` TOTAL seconds when every step before the grids takes its whole allowance.
all_cell() {
  local left=$(( $1 - ENV_LIMIT - ENV_GRACE )) lim
  lim=$(share "$TESTS_WANT" "$left"); (( lim >= 10 )) && left=$(( left - lim - TESTS_GRACE ))
  lim=$(share "$LOOP_WANT" "$left"); (( lim >= 10 )) && left=$(( left - lim - LOOP_GRACE ))
  echo $(( left - QUEUE_EARLY - QUEUE_START ))
}

# The session's minimum: the fewest whole seconds under `all` that leave a queue cell at least one second.
all_minimum() { local t=1; while (( $(all_cell "$t") < 1 )); do t=$(( t + 1 )); done; echo "$t"; }

# The seconds a queue cell has under `all MINUTES` and `queue MINUTES` when every step before the grids takes its
# whole allowance: a queue entry's cell_minutes must fit in them for its cells to start. MINUTES under the session's
# minimum (no second left for a cell under `all`; zero and negative ones too) are refused in one line, exit 2.
window() {
  local total cell low
  total=$(python3 -c 'import sys; m = float(sys.argv[1]); assert m <= 1440; print(int(max(m, 0) * 60))' "$1" 2>/dev/null) \
    || { echo "error: MINUTES must be a number up to 1440 (a day), got '$1'" >&2; exit 2; }
  cell=$(all_cell "$total")
  if (( cell < 1 )); then
    low=$(all_minimum)
    echo "error: window $1: under the session's minimum of $low s ($(python3 -c "print(round($low / 60 + 0.005, 2))") min:" \
      "the steps before the grids and the queue's start leave no time for a cell); give more minutes" >&2
    exit 2
  fi
  echo "all $1: $cell s for a cell; queue $1: $(( total - QUEUE_EARLY - QUEUE_START )) s for a cell"
}

case $part in
window) # what a cell of the queue has under `all MINUTES` and `queue MINUTES` (default 12)
  window "${2:-12}" ;;
pack)   # here, on the CPU: prepare the data of every queue cell and pack it into DIR (default .device)
  dir=${2:-.device}
  python3 -m posenc.cli.main queue pack "$queue" "$dir" || exit $?
  travels "$dir" || true ;;
all)    # the whole session under one deadline (MINUTES, default 12)
  mkdir -p "$out"; session "${3:-12}" ;;
queue)  # only the queue's cells and their archive, under one deadline (MINUTES, default 12)
  mkdir -p "$out"; : >"$out/summary.txt"; set_deadline "${3:-12}"; payload_note; grids "[grids]"
  summary "[archive] $(archive_line)" ;;
tests)  # every CUDA test (pytest -m cuda; CUDA_TESTS_LIMIT seconds in all, default 240)
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print(torch.__version__)"
  cuda_tests "${CUDA_TESTS_LIMIT:-240}"; echo "rc=$? cuda_tests" ;;
lm_nan)  # a bf16 LM run that hit NaN gradients before avoid_cudnn_attention
  mkdir -p "$out"
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
  mkdir -p "$out"
  step train_loop 240 bench --methods ape --lengths 32 --reps 2 --no-memory --no-decode --loop-steps 200 \
    --loop-tokens 8192 --out "$out/train_loop.json" ;;
bench)  # transformer-base: every method at 32/128 (MFU), Shaw vs APE up to 2,048 with peak memory
  mkdir -p "$out"
  step base_short 240 bench --preset transformer-base --lengths 32,128 --batch-tokens 16384 --reps 5 --warmup 2 \
    --no-memory --decode-batch 64 --decode-len 32 --decode-reps 3 --out "$out/base_short.json" --plot "$out/base_short.png"
  step shaw_long 180 bench --preset transformer-base --methods shaw --lengths 512,1024,2048 --batch-tokens 16384 \
    --reps 3 --warmup 2 --no-decode --out "$out/shaw_long.json" ;;
peers)  # MarianMT (Hugging Face) on the same GPU, batches and precision; GRU variants
  mkdir -p "$out"
  step hf_compare 150 python3 -m posenc.bench.hf_compare --device cuda --preset transformer-base --lengths 32,128 \
    --batch-tokens 16384 --reps 5 --decode-batch 64 --decode-len 32 --out "$out/hf_compare.json"
  step gru_variants 180 python3 -m posenc.bench.gru_variants --device cuda --preset transformer-base --lengths 32,128 \
    --batch-tokens 16384 --reps 10 ;;
*) echo "error: unknown part '$part' (window|pack|all|queue|tests|lm_nan|loop|bench|peers)" >&2; exit 2 ;;
esac

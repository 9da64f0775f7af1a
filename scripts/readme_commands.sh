#!/usr/bin/env bash
# Runs the README's "What it does" table top to bottom in a fresh clone of this repository (its
# committed HEAD), as a newcomer would, on the CPU. Each row runs as written; where a row would
# run for long (training, the demo), tiny --set overrides bound it. Rows that need something
# first are also run before it exists, and must then refuse in one line that says what to do.
#
#   bash scripts/readme_commands.sh [OUT_DIR]      (CI: tests/integration/test_readme_commands.py)
#
# Uses the venv of this checkout (TRITONFORGE_VENV to change) with the clone's src/ first on
# PYTHONPATH, so the clone's code is what runs. Writes OUT_DIR/steps.jsonl (one line per step:
# name, exit code, expected exit code, seconds) and each step's output to OUT_DIR/<step>.log;
# exits non-zero at the first step that does not behave. Needs no network and no GPU.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${TRITONFORGE_VENV:-$REPO/.venv}
OUT=${1:-$(mktemp -d -t tf-readme-XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d -t tf-readme-clone-XXXXXX)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

git clone -q "$REPO" "$WORK/clone" || exit 1
cd "$WORK/clone" || exit 1
export PATH="$VENV/bin:$PATH" PYTHONPATH="$WORK/clone/src" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
: > "$OUT/steps.jsonl"

# step NAME EXPECTED_RC SECONDS -- COMMAND...   (stdout+stderr to OUT/NAME.log, stderr also to .err)
step() {
  local name=$1 want=$2 limit=$3
  shift 4
  local t0=$SECONDS rc
  echo "\$ $*" > "$OUT/$name.log"
  timeout "$limit" "$@" >> "$OUT/$name.log" 2> "$OUT/$name.err"
  rc=$?
  cat "$OUT/$name.err" >> "$OUT/$name.log"
  printf '{"step": "%s", "rc": %d, "expected": %d, "seconds": %d}\n' \
    "$name" "$rc" "$want" "$((SECONDS - t0))" >> "$OUT/steps.jsonl"
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, expected $want (see $OUT/$name.log)" >&2
    tail -n 20 "$OUT/$name.log" >&2
    exit 1
  fi
  echo "ok   $name (exit $rc, $((SECONDS - t0)) s)"
}

# A refusal: exit 2, one stderr line, containing TEXT.
refusal() {
  local name=$1 text=$2
  if [ "$(wc -l < "$OUT/$name.err")" -ne 1 ] || ! grep -qF -- "$text" "$OUT/$name.err"; then
    echo "FAIL $name: expected one stderr line with: $text" >&2
    cat "$OUT/$name.err" >&2
    exit 1
  fi
}

has() {  # has NAME TEXT: the step's output contains TEXT
  grep -qF -- "$2" "$OUT/$1.log" || { echo "FAIL $1: output lacks: $2" >&2; exit 1; }
}

TINY_RL=(--set steps=1 --set problems_per_step=1 --set buffer.group_size=2
  --set agent.max_turns=1 --set agent.sampling.max_new_tokens=16 --set evaluate.samples=1
  --set 'problems.ids=["relu"]')
SOLUTION=src/tritonforge/problems/builtin/elementwise/relu_triton.py

# -- Judge one candidate file ------------------------------------------------------------------
step show_cpu_ref 0 120 -- sh -c 'tritonforge problems show relu --size cpu > relu_cpu.py'
step eval_kernel 0 300 -- tritonforge eval-kernel relu_cpu.py "$SOLUTION" --device cpu --json
has eval_kernel '"status":"correct"'
has eval_kernel 'compile: trial 1/5'
step eval_kernel_gpu_size 0 300 -- tritonforge eval-kernel \
  src/tritonforge/problems/builtin/elementwise/relu.py "$SOLUTION" --device cpu --timeout 5 --json
has eval_kernel_gpu_size 'warning: one call of this reference moves 1.0 GiB'
has eval_kernel_gpu_size '"status":"timeout"'
step eval_kernel_cuda 2 60 -- env CUDA_VISIBLE_DEVICES= tritonforge eval-kernel relu_cpu.py \
  "$SOLUTION" --device cuda
refusal eval_kernel_cuda "needs a GPU"

# -- Judge a folder of candidates --------------------------------------------------------------
mkdir -p cands && cp "$SOLUTION" cands/relu.py
step eval_dir 0 600 -- tritonforge eval-dir cands --suite builtin --size cpu --workers 1
has eval_dir '"correct": 1'

# -- Browse problems ---------------------------------------------------------------------------
step problems_list 0 120 -- tritonforge problems list --suite builtin
has problems_list '43 problem(s)'
step problems_show 0 120 -- tritonforge problems show relu --solution
if [ -n "${TRITONFORGE_KERNELBENCH:-}" ]; then
  step problems_scale 0 600 -- tritonforge problems scale --level 1 --name 19_ReLU --no-cache
else  # a fresh clone has no KernelBench data: the command must say where to put it
  step problems_scale 2 120 -- tritonforge problems scale --level 1 --name 19_ReLU --no-cache
  refusal problems_scale "no KernelBench data"
fi

# -- Evaluation service ------------------------------------------------------------------------
PORT=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tritonforge serve-eval --host 127.0.0.1 --port "$PORT" --device cpu --workers 1 \
  > "$OUT/serve_eval.log" 2>&1 &
SERVER_PID=$!
step serve_eval 0 300 -- python - "$PORT" "$SOLUTION" <<'EOF'
import sys, time, httpx
port, solution = sys.argv[1], open(sys.argv[2]).read()
base = f"http://127.0.0.1:{port}"
for _ in range(240):
    try:
        if httpx.get(f"{base}/health", timeout=2).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.5)
else:
    sys.exit("the server did not come up")
body = {"suite": "builtin", "problem_id": "relu", "size": "cpu", "source": solution}
verdict = httpx.post(f"{base}/v1/eval", json=body, timeout=240).json()
print(verdict["status"])
sys.exit(0 if verdict["status"] == "correct" else 1)
EOF
kill "$SERVER_PID" && wait "$SERVER_PID" 2>/dev/null
SERVER_PID=""

# -- Tiny model --------------------------------------------------------------------------------
step make_tiny_model 0 300 -- tritonforge make-tiny-model --out runs/tiny-model

# -- rollout / train before the SFT model exists: refused, saying what to run ----------------
step rollout_before_sft 2 60 -- tritonforge rollout --config configs/rollout-cpu.toml
refusal rollout_before_sft "tritonforge sft --run-dir runs/demo/sft"
step train_before_sft 2 60 -- tritonforge train --config configs/cpu-tiny.toml
refusal train_before_sft "tritonforge sft --run-dir runs/demo/sft"
[ ! -e runs/cpu-tiny ] || { echo "FAIL: a refused train left runs/cpu-tiny" >&2; exit 1; }

# -- SFT (writes the model configs/cpu-tiny.toml trains) ---------------------------------------
step sft 0 900 -- tritonforge sft --run-dir runs/demo/sft --set sft.max_steps=2
[ -f runs/demo/sft/final/config.json ] || { echo "FAIL: no runs/demo/sft/final" >&2; exit 1; }

# -- Collect trajectories ----------------------------------------------------------------------
step rollout 0 900 -- tritonforge rollout --config configs/rollout-cpu.toml --set buffer.group_size=2 \
  --set agent.max_turns=1 --set agent.sampling.max_new_tokens=16 --set 'problems.ids=["relu"]'

# -- Benchmark a model -------------------------------------------------------------------------
step bench_model 0 900 -- tritonforge bench-model --set samples=2 --set agent.max_turns=1 \
  --set agent.sampling.max_new_tokens=16 --set 'problems.ids=["relu", "tanh"]'

# -- RL / compare ------------------------------------------------------------------------------
step train 0 900 -- tritonforge train --config configs/cpu-tiny.toml "${TINY_RL[@]}"
BASE=()
for ((i = 0; i < ${#TINY_RL[@]}; i += 2)); do BASE+=(--set "base.${TINY_RL[i + 1]}"); done
step compare 0 1200 -- tritonforge compare "${BASE[@]}" \
  --set 'variants={grpo = ["trainer.loss.type=grpo"], gspo = ["trainer.loss.type=gspo"]}'
has compare 'comparison.html'

# -- RL on a Ray cluster -----------------------------------------------------------------------
step train_ray 0 1200 -- tritonforge train --config configs/ray-cpu.toml --ray --set steps=1 \
  --set agent.max_turns=1 --set agent.sampling.max_new_tokens=16

# -- Report of a run ---------------------------------------------------------------------------
step report 0 300 -- tritonforge report runs/cpu-tiny
[ -f runs/cpu-tiny/report.html ] || { echo "FAIL: no report.html" >&2; exit 1; }

# -- Everything on CPU -------------------------------------------------------------------------
# the demo trains on the variants suite (other spellings of the built-in problems): one of its own
DEMO=(--set sft.sft.max_steps=2)
for ((i = 0; i < ${#TINY_RL[@]}; i += 2)); do
  case ${TINY_RL[i + 1]} in problems.ids=*) ;; *) DEMO+=(--set "train.${TINY_RL[i + 1]}") ;; esac
done
DEMO+=(--set 'train.problems.ids=["relu_clamp"]')
step demo 0 1200 -- tritonforge demo --set run_dir=runs/demo2 "${DEMO[@]}"
has demo '"report"'

echo "all README commands behave; steps in $OUT/steps.jsonl"

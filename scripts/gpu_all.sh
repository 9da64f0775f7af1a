#!/usr/bin/env bash
# Every GPU measurement of the project in one go (each step time-boxed; a failing step does not
# stop the others). Results: $OUT/results.tar.gz (JSON, markdown, logs) and $OUT/log.txt.
# Usage on a GPU machine: OUT=/tmp/gpu-out bash scripts/gpu_all.sh
set -u
OUT=${OUT:-/tmp/gpu-out}
R=$OUT/r
mkdir -p "$R"
source scripts/gpu_env.sh
exec > >(tee -a "$OUT/log.txt") 2>&1
# STEPS picks steps (default all): e.g. STEPS="suite gpu_tests" on a time-limited machine.
STEPS=${STEPS:-suite overhead gpu_tests defenses train_step server kb_self timing rl_loop_tests rl_loop}
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -rA"
step() { local name=$1 secs=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) echo "=== $name skipped"; return 0;; esac
  echo "=== $name ($(date +%T), limit ${secs}s)"; local t0=$SECONDS
  # SIGINT first: pytest then still prints its summary and writes its junit file
  timeout -s INT --kill-after=20 "$secs" "$@"; echo "=== $name rc=$? in $((SECONDS - t0))s"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys,torch,triton;print('python',sys.version.split()[0],'torch',torch.__version__,'triton',triton.__version__)"
python3 scripts/export_suite.py /tmp/suite --size gpu >/dev/null
# quick looks at one area each (gpu_tests runs them too)
step devshare ${T_DEVSHARE:-120} $PYTEST tests/gpu/test_devshare_gpu.py --junitxml "$R/devshare.xml"
step cuda_backend ${T_CUDA:-240} $PYTEST -s tests/gpu/test_cuda_backend_gpu.py --junitxml "$R/cuda_backend.xml"
# the sealed audit on the GPU: hybrid on CUDA (marker, share by work), Triton compiling under the
# seccomp thread block, the issue-14 attacks (s*) and the timing attacks, the legit corpus
SEALED_K=${SEALED_K:-"hybrid or thread_block or kineto or s1_ or s2_ or s3_ or s4_ or s5_ or s6_ or s8_ or s9_ or c3_ or legit"}
step sealed ${T_SEALED:-480} $PYTEST -s tests/gpu/test_hybrid_gpu.py tests/gpu/test_attacks_gpu.py -k "$SEALED_K" --junitxml "$R/sealed.xml"
step suite ${T_SUITE:-300} python3 -m tritonforge eval-dir /tmp/suite/solutions --suite builtin --size gpu --device cuda --workers 6 --timeout 120 --out "$R/suite"
step overhead ${T_OVERHEAD:-150} python3 benchmarks/eval_overhead.py --device cuda --size gpu --sample ${OVERHEAD_SAMPLE:-10} --repeats 2 --transport ${TRANSPORT:-auto} --out "$R/overhead.json"
step gpu_tests ${T_TESTS:-400} $PYTEST tests/gpu tests/eval/test_status_corpus.py tests/unit/test_builtin_suite.py tests/unit/test_protocol.py -k "${GPU_TESTS_K:-}" --junitxml "$R/gpu_tests.xml"
step defenses ${T_DEF:-240} python3 benchmarks/defense_cost.py --device cuda --repeats 3 --out "$R/defense_cost.json" ${DEF_ARGS:-}
step train_step ${T_TRAIN:-430} python3 benchmarks/train_step.py --total $(( ${T_TRAIN:-430} - 30 )) --profile --out "$R/train_step.json"
step server ${T_SERVER:-240} python3 benchmarks/eval_server.py --device cuda --size gpu --n ${SERVER_N:-32} --workers 6 --concurrency 16 --baseline-n ${BASELINE_N:-3} --out "$R/server.json"
# calibration of fair timing (resumable: run the same step again to continue a cut-off run)
step kb_self ${T_KB_SELF:-570} python3 benchmarks/kernelbench_self.py --time-box ${BOX_KB_SELF:-510} --out "${KB_SELF_OUT:-docs/bench/h200_kernelbench_self.json}"
step timing ${T_TIMING:-570} python3 benchmarks/timing_consistency.py --time-box ${BOX_TIMING:-510} --out "${TIMING_OUT:-docs/bench/h200_timing_consistency.json}"
# the closed RL loop on this GPU (issue 33): its GPU test, then the benchmark (TINY_POLICY: a
# carried tiny-sft folder, else it is made here first); docs/gpu.md
step rl_loop_tests ${T_RL_TESTS:-180} $PYTEST -s tests/gpu/test_rl_loop_gpu.py --junitxml "$R/rl_loop_tests.xml"
step rl_loop ${T_RL_LOOP:-400} python3 benchmarks/rl_loop.py ${TINY_POLICY:+--tiny-policy "$TINY_POLICY"} --work "$R/rl_runs" --out "${RL_LOOP_OUT:-$R/h200_rl_loop.json}" ${RL_LOOP_ARGS:-}
cp -f docs/bench/h200_kernelbench_self.json docs/bench/h200_timing_consistency.json "$R/" 2>/dev/null
tar -czf "$OUT/results.tar.gz" -C "$R" .
echo "=== done $(date +%T)"

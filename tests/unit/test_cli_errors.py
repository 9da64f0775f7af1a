"""A newcomer's mistakes, each answered in one line: exit 2, no traceback, a useful suggestion.

Covers: the `tritonforge` command in a child process (so exit codes, stdout and stderr are what a
user sees) for unknown suites, sizes, problems, rewards, modes, keys, commands and flags; a
folder where nothing matches; `--device cuda` without a GPU (visible GPUs hidden, so the test
means the same on a GPU machine); a training config whose model does not exist yet (a fresh
clone); and that a refused `train` imported no torch and left no run dir. With `--json`, the
refusal is also one JSON object on stdout. Only verdicts exit 0 (eval tier).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILTIN = REPO / "src" / "tritonforge" / "problems" / "builtin" / "elementwise"
REF, CAND = str(BUILTIN / "relu.py"), str(BUILTIN / "relu_triton.py")
NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}

# Runs main() and reports, on the last line, whether torch was imported: a refused request must
# be refused before any heavy import (weights, the evaluator).
PROBE = (
    "import json, sys\n"
    "from tritonforge.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))\n"
)


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """(exit code, stdout lines without the probe's, stderr lines, torch imported)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd or REPO,
        env={**os.environ, **NO_GPU, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout.splitlines()
    assert out, proc.stderr
    probe = json.loads(out[-1])
    return probe["rc"], out[:-1], proc.stderr.splitlines(), probe["torch"]


def refused(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """The one stderr line of a refused request (exit 2, no traceback, nothing on stdout)."""
    rc, out, err, torch_loaded = cli(*args, cwd=cwd, env=env)
    assert rc == 2, (out, err)
    assert out == [] and len(err) == 1, err
    assert "Traceback" not in err[0]
    assert not torch_loaded, "refused only after importing torch"
    return err[0]


# -- eval-dir ----------------------------------------------------------------------------------
def test_eval_dir_unknown_suite_lists_every_known_one(tmp_path: Path) -> None:
    line = refused("eval-dir", str(tmp_path), "--suite", "kernelbenh")
    assert line.startswith("tritonforge eval-dir: error: --suite: unknown suite 'kernelbenh'")
    assert "did you mean 'kernelbench'?" in line and "known: builtin, kernelbench" in line


def test_eval_dir_unknown_size(tmp_path: Path) -> None:
    line = refused("eval-dir", str(tmp_path), "--size", "gpux")
    assert "--size: unknown builtin size preset 'gpux'; did you mean 'gpu'?" in line


def test_eval_dir_where_no_file_matches_a_problem(tmp_path: Path) -> None:
    assert "no .py files at all" in refused("eval-dir", str(tmp_path))
    (tmp_path / "my_kernel.py").write_text("x = 1\n")
    line = refused("eval-dir", str(tmp_path))
    assert "no file in" in line and "my_kernel.py" in line and "relu.py" in line


def test_eval_dir_missing_folder(tmp_path: Path) -> None:
    assert "is not a directory" in refused("eval-dir", str(tmp_path / "nope"))


# -- eval-kernel -------------------------------------------------------------------------------
def test_eval_kernel_cuda_without_a_gpu_is_refused_before_any_work() -> None:
    line = refused("eval-kernel", REF, CAND, "--device", "cuda")
    assert "device 'cuda' needs a GPU" in line and "use cpu instead" in line


def test_eval_kernel_json_refusal_is_one_json_line_on_stdout() -> None:
    rc, out, err, torch_loaded = cli("eval-kernel", REF, CAND, "--device", "cuda", "--json")
    assert rc == 2 and len(out) == 1 and not torch_loaded
    payload = json.loads(out[0])
    assert payload["exit_code"] == 2 and payload["command"] == "tritonforge eval-kernel"
    assert "needs a GPU" in payload["error"]
    assert err == [f"tritonforge eval-kernel: error: {payload['error']}"]  # the same, for people
    rc, out, err, _ = cli("eval-kernel", REF, CAND, "--mode", "stric", "--json")
    assert rc == 2 and len(err) == 1 and "did you mean 'strict'" in json.loads(out[0])["error"]


def test_eval_kernel_unknown_reward_is_refused_before_evaluating() -> None:
    line = refused("eval-kernel", REF, CAND, "--reward", "kevn")
    assert "unknown reward 'kevn'; did you mean 'kevin'?" in line
    assert "known: kevin, log_speedup, tritonforge" in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--mode", "stric"], "invalid choice: 'stric'"),
        (["--trials", "0"], "--trials 0: correctness_trials"),
        (["--timeout", "-1"], "--timeout -1.0"),
        (["--set", "perf_trils=3"], "unknown key perf_trils; did you mean 'perf_trials'"),
        (["--jsn"], "unrecognized arguments: --jsn; did you mean --json?"),
        (["--eval-config", "missing.toml"], "config file missing.toml does not exist"),
    ],
)
def test_eval_kernel_bad_settings(args: list[str], fragment: str) -> None:
    assert fragment in refused("eval-kernel", REF, CAND, *args)


def test_eval_kernel_missing_file() -> None:
    assert "candidate nope.py is not a file" in refused("eval-kernel", REF, "nope.py")


# -- commands and flags ------------------------------------------------------------------------
def test_unknown_command_and_flag_typos() -> None:
    assert "did you mean 'train'?" in refused("trian")
    line = refused("train", "--confg", "x")
    assert line.startswith("tritonforge train: error:") and "did you mean --config?" in line
    assert "did you mean --suite?" in refused("problems", "list", "--sute", "builtin")


def test_problems_show_and_make_tiny_model_refusals(tmp_path: Path) -> None:
    line = refused("problems", "show", "relux", "--suite", "builtin")
    assert "unknown problem 'relux'; did you mean 'relu'" in line
    line = refused("make-tiny-model", "--layers", "0", "--out", str(tmp_path / "m"))
    assert "layers: Input should be greater than or equal to 1" in line
    assert not (tmp_path / "m").exists()


# -- train -------------------------------------------------------------------------------------
TINY = ['engine.model_path="runs/tiny-model"', 'trainer.model.path="runs/tiny-model"']


def _train(tmp_path: Path, *sets: str) -> str:
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(REPO / "configs" / "cpu-tiny.toml")]
    args += ["--run-dir", str(run_dir)]
    for item in sets:
        args += ["--set", item]
    line = refused(*args, cwd=tmp_path)
    assert not run_dir.exists(), "a refused run left its run dir behind"
    return line


def test_train_unknown_problem_id_suggests_existing_names(tmp_path: Path) -> None:
    line = _train(tmp_path, 'problems.ids=["relux"]', *TINY)
    assert "problems.ids: unknown problem 'relux'; did you mean 'relu'" in line


def test_train_on_a_fresh_clone_says_to_make_the_sft_model_first(tmp_path: Path) -> None:
    line = _train(tmp_path)  # cwd has no runs/: the config's runs/demo/sft/final is missing
    assert "engine.model_path: model runs/demo/sft/final does not exist" in line
    assert "tritonforge sft --run-dir runs/demo/sft" in line and "tritonforge demo" in line


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("probelms.ids=[1]", "unknown key probelms; did you mean 'problems'?"),
        ('trainer.loss.type="grop"', "unknown loss 'grop'; did you mean 'grpo'"),
        ('engine.type="vlm"', "engine.type: Input should be"),
        ('buffer.filter="drop_zero_varianc"', "did you mean 'drop_zero_variance'?"),
        ('buffer.normalize="zscor"', "unknown buffer normalize stage 'zscor'"),
        ('agent.returns.type="discount"', "unknown returns mode 'discount'"),
        ('task.type="kernal"', "unknown task 'kernal'; did you mean 'kernel'?"),
        ('task.reward="kevn"', "task.reward: unknown reward 'kevn'"),
        ('eval.settings.reward="kevin"', "reward moved from the evaluation settings to the task"),
        ('eval.settings.device="cuda"', "eval.settings.device: device 'cuda' needs a GPU"),
        ('engine.device="cuda"', "engine.device: device 'cuda' needs a GPU"),
        ('problems.suite="kernelbenh"', "problems.suite: unknown suite 'kernelbenh'"),
        ('problems.size="gpux"', "problems.size: unknown builtin size preset 'gpux'"),
        ('task.prompt.system_template="sytem"', "task.prompt.system_template: unknown prompt"),
        ('eval.type="http"', "eval.urls[0]"),  # with eval.urls=["localhost:1"] below
        ('weight_sync="state_dict"', None),
    ],
)
def test_train_names_are_checked_with_suggestions(
    tmp_path: Path, override: str, fragment: str | None
) -> None:
    extra = ['eval.urls=["localhost:1"]'] if override.startswith("eval.type") else []
    if fragment is None:  # valid with the hf engine: refused only with a server engine
        extra, fragment = ['engine.type="vllm"'], "weight_sync: state_dict needs the in-process"
    assert fragment in _train(tmp_path, override, *TINY, *extra)


def test_train_help_documents_the_flags() -> None:
    rc, out, err, _ = cli("train", "--help")
    text = "\n".join(out)
    assert rc == 0 and err == []
    for flag in ("--config", "--set", "--print-config", "--list-keys", "--run-dir", "--ray"):
        assert flag in text
    assert "configs/cpu-tiny.toml" in text and "tritonforge demo" in text

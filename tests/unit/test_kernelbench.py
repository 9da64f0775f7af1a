"""KernelBench loaders, size scaling and the `tritonforge problems` command.

Covers: the 200 shared KernelBench records (levels, ids), the directory / JSONL / parquet loaders
and their errors, source resolution, the Hugging Face loader's offline errors, which constants
count as sizes, hand-checked constant rewrites, scaling inline sources (budget, factor, already
small, unscalable, structural constants untouched), and CLI smoke tests. The slow test scales all
200 problems. Tests that need ../shared/data/kernelbench skip when it is absent.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tritonforge.cli import main
from tritonforge.problems import load_suite
from tritonforge.problems.kernelbench import (
    KernelBenchError,
    guess_category,
    load_kernelbench_dir,
    load_kernelbench_hf,
    load_kernelbench_records,
    make_problem,
    resolve_source,
)
from tritonforge.problems.scaling import DEFAULT_ELEMENT_BUDGET, default_cache_dir, scale_problems
from tritonforge.problems.sizing import module_constants, rewrite_constants, size_constants

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kernelbench"


@pytest.fixture
def data() -> Path:
    if not (DATA / "level1.jsonl").is_file():
        pytest.skip(f"shared KernelBench data absent ({DATA})")
    return DATA


@pytest.fixture(scope="module")
def _module_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _private_cache(_module_cache, monkeypatch):
    """Scaling results are cached in a folder of this module's own (shared by its tests)."""
    monkeypatch.setenv("TRITONFORGE_CACHE_DIR", str(_module_cache))


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(path.glob("level*.jsonl")) for line in f.open()]


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


def test_all_200_records_load_with_levels_and_ids(data):
    problems = load_kernelbench_records(data)
    assert len(problems) == 200
    assert [p.level for p in problems].count(1) == 100
    assert [p.level for p in problems].count(2) == 100
    assert len({p.id for p in problems}) == 200
    relu = next(p for p in problems if p.level == 1 and p.problem_id == 19)
    assert relu.id == "kernelbench/L1/19_ReLU"
    assert (relu.suite, relu.name, relu.category, relu.size) == (
        "kernelbench",
        "ReLU",
        "activation",
        "original",
    )
    assert "torch.relu" in relu.reference_src
    assert all(p.id == f"kernelbench/L{p.level}/{p.problem_id}_{p.name}" for p in problems)
    assert [p.problem_id for p in problems if p.level == 2] == list(range(1, 101))
    assert {p.category for p in problems if p.level == 2} == {"fusion"}
    only2 = load_kernelbench_records(data, levels=[2])
    assert len(only2) == 100 and {p.level for p in only2} == {2}
    via_suite = load_suite("kernelbench", source=str(data / "level1.jsonl"))
    assert [p.id for p in via_suite] == [p.id for p in problems if p.level == 1]


def test_directory_layout_round_trip(data, tmp_path):
    records = _records(data)
    for r in records:
        d = tmp_path / f"level{r['level']}"
        d.mkdir(exist_ok=True)
        (d / f"{r['problem_id']}_{r['name']}.py").write_text(r["source"])
    (tmp_path / "level1" / "README.txt").write_text("not a problem")
    loaded = load_kernelbench_dir(tmp_path)
    expected = load_kernelbench_records(data)
    assert [p.id for p in loaded] == [p.id for p in expected]
    assert [p.reference_src for p in loaded] == [p.reference_src for p in expected]
    assert len(load_kernelbench_dir(tmp_path, levels=[1])) == 100
    assert [p.id for p in load_suite("kernelbench", source=tmp_path, levels=[2])] == [
        p.id for p in expected if p.level == 2
    ]


def test_parquet_round_trip_with_code_alias(data, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = _records(data)
    rows = [{"code": r["source"], "level": r["level"], "name": r["name"],
             "problem_id": r["problem_id"]} for r in records]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "kb.parquet")
    loaded = load_kernelbench_records(tmp_path / "kb.parquet")
    expected = load_kernelbench_records(data)
    assert [(p.id, p.reference_src) for p in loaded] == [(p.id, p.reference_src) for p in expected]


def test_records_accept_hf_style_names(tmp_path):
    path = tmp_path / "hf.jsonl"
    rec = {"level": 1, "problem_id": 19, "name": "19_ReLU.py", "code": "x = 1\n"}
    path.write_text(json.dumps(rec) + "\n\n")  # blank lines are ignored
    (p,) = load_kernelbench_records(path)
    assert (p.id, p.name, p.reference_src) == ("kernelbench/L1/19_ReLU", "ReLU", "x = 1\n")


def test_malformed_lines_name_file_and_line(tmp_path):
    good = json.dumps({"level": 1, "problem_id": 1, "name": "A", "source": "x = 1"})
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text(good + "\n{not json\n")
    with pytest.raises(KernelBenchError, match=r"bad\.jsonl:2: not valid JSON"):
        load_kernelbench_records(bad_json)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(good + "\n" + json.dumps({"level": 1, "problem_id": 2, "name": "B"}) + "\n")
    with pytest.raises(KernelBenchError, match=r"missing\.jsonl:2: record lacks source"):
        load_kernelbench_records(missing)
    bad_level = tmp_path / "level.jsonl"
    bad_level.write_text(json.dumps({"level": "one", "problem_id": 1, "name": "A", "source": "x"}))
    with pytest.raises(KernelBenchError, match=r"level\.jsonl:1: level/problem_id must be"):
        load_kernelbench_records(bad_level)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(good + "\n" + good + "\n")
    with pytest.raises(KernelBenchError, match="duplicate problem kernelbench/L1/1_A"):
        load_kernelbench_records(dup)
    with pytest.raises(KernelBenchError, match="no levelN/ folders"):
        load_kernelbench_dir(tmp_path)


def test_source_resolution(tmp_path, monkeypatch):
    f = tmp_path / "kb.jsonl"
    f.write_text(json.dumps({"level": 1, "problem_id": 3, "name": "C", "source": "y = 2"}) + "\n")
    monkeypatch.setenv("TRITONFORGE_KERNELBENCH", str(f))
    assert resolve_source() == f
    assert resolve_source(tmp_path) == tmp_path  # explicit path wins over the environment
    assert [p.id for p in load_suite("kernelbench")] == ["kernelbench/L1/3_C"]
    assert resolve_source("hf:someone/KB") == "hf:someone/KB"
    with pytest.raises(KernelBenchError, match="does not exist"):
        resolve_source(tmp_path / "nope")
    monkeypatch.setattr("tritonforge.problems.kernelbench.SHARED_DATA", tmp_path / "absent")
    monkeypatch.delenv("TRITONFORGE_KERNELBENCH")
    with pytest.raises(KernelBenchError, match="TRITONFORGE_KERNELBENCH"):
        resolve_source()


def test_hf_loader_fails_fast_and_clearly(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(KernelBenchError, match="pip install datasets"):
        load_kernelbench_hf()
    monkeypatch.setitem(sys.modules, "datasets", type(sys)("datasets"))  # installed, offline
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("tritonforge.problems.kernelbench._hub_reachable", lambda: False)
    t0 = time.monotonic()
    with pytest.raises(KernelBenchError, match="cannot reach the Hugging Face Hub"):
        load_kernelbench_hf()
    assert time.monotonic() - t0 < 1.0


def test_category_guess():
    cases = {
        "Matmul_with_transposed_A": "matmul",
        "conv_depthwise_2D_square_input_square_kernel": "conv",
        "Max_Pooling_2D": "pooling",
        "Softmax": "activation",
        "Argmin_over_a_dimension": "reduction",
        "cumsum": "reduction",
        "RMSNorm_": "norm",
        "HuberLoss": "loss",
        "Something_else": "other",
    }
    assert {n: guess_category(n, 1) for n in cases} == cases
    assert guess_category("Conv2d_ReLU_BiasAdd", 2) == "fusion"


# --------------------------------------------------------------------------------------------
# Constants: which are sizes, rewriting
# --------------------------------------------------------------------------------------------

CONV_SRC = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups, eps):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding, groups=groups)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps=eps)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))

batch_size = 64
in_channels = 36
out_channels = 96
height = width = 128  # chained
kernel_size = 3
stride = 1
padding = 1
groups = 3
num_groups = 8
eps = 1e-5
dim = 1

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, eps]
"""


def test_size_constants_split_sizes_from_structure():
    specs = size_constants(CONV_SRC)
    assert set(specs) == {"batch_size", "in_channels", "out_channels", "height", "width"}
    assert specs["in_channels"].multiple == 3  # 36 divisible by groups=3, not by num_groups=8
    assert specs["out_channels"].multiple == 24  # lcm(3, 8)
    assert specs["batch_size"].multiple == 1  # divisibility anchors apply to channel-like sizes
    src = "dim = 8192\nd2 = 4\nM, K = 1024 * 2, 77\nN = M\np = 0.5\nflag = True\nshape = (16384,)\n"
    specs = size_constants(src)
    assert set(specs) == {"dim", "d2", "M", "K", "shape"}  # N refers to a name: derived
    assert specs["K"].odd and not specs["M"].odd
    assert specs["M"].value == 2048 and specs["shape"].value == (16384,)


def test_rewrite_constants_hand_checked():
    src = (
        "import torch\n"
        "N = 2048 * 2  # size\n"
        "h = w = 256\n"
        "d, c = 16, 3\n"
        "kernel_size = 3\n"
        "shape = (N,)\n"
    )
    out = rewrite_constants(src, {"N": 512, "h": 64, "d": 4, "shape": (8,)})
    assert out == (
        "import torch\n"
        "N = 512  # size\n"
        "h = 64; w = 256\n"
        "d, c = 4, 3\n"
        "kernel_size = 3\n"
        "shape = (8,)\n"
    )
    assert rewrite_constants(src, {"h": 32, "w": 32}).splitlines()[2] == "h = w = 32"
    consts = module_constants(out)
    assert (consts["N"], consts["h"], consts["w"], consts["d"], consts["c"]) == (512, 64, 256, 4, 3)


# --------------------------------------------------------------------------------------------
# Scaling (child processes; one batch for all inline sources)
# --------------------------------------------------------------------------------------------

RELU_SRC = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""

SMALL_SRC = RELU_SRC.replace("4096", "16").replace("393216", "64")
LITERAL_SRC = RELU_SRC.replace("torch.rand(batch_size, dim)", "torch.rand(2, 1 << 20)")


def _inline(pid: str, src: str):
    return make_problem(1, len(pid), pid, src)


@pytest.fixture(scope="module")
def inline_scaled():
    problems = [
        _inline("relu", RELU_SRC),
        _inline("conv", CONV_SRC),
        _inline("small", SMALL_SRC),
        _inline("literal", LITERAL_SRC),
    ]
    scaled, report = scale_problems(problems, 2**16, workers=2, progress=False)
    return {p.name: p for p in scaled}, {r.problem_id.split("_", 1)[1]: r for r in report}


def _run(src: str):
    import torch

    ns: dict = {}
    exec(compile(src, "<scaled>", "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        return inputs, model(*inputs)


def test_scale_relu_to_budget_hand_checked(inline_scaled):
    scaled, report = inline_scaled
    r = report["relu"]
    assert r.ok and r.reason == "scaled"
    # largest constant halves first: dim 393216 -> 3072 (7 halvings), then alternate with
    # batch 4096 down to 256 x 384 = 98304 > 2**16, then dim -> 192: 49152 elements.
    assert r.changed == {"batch_size": (4096, 256), "dim": (393216, 192)}
    assert (r.input_elements_before, r.input_elements_after) == (4096 * 393216, 256 * 192)
    (x,), out = _run(r.new_src)
    assert tuple(x.shape) == (256, 192) and tuple(out.shape) == (256, 192)
    assert scaled["relu"].size == "scaled" and scaled["relu"].reference_src == r.new_src
    assert scaled["relu"].meta["scaled"] == {"batch_size": [4096, 256], "dim": [393216, 192]}


def test_scale_never_touches_structural_constants(inline_scaled):
    _, report = inline_scaled
    r = report["conv"]
    assert r.ok, r.reason
    assert set(r.changed) <= {"batch_size", "in_channels", "out_channels", "height", "width"}
    after = module_constants(r.new_src)
    for name in ("kernel_size", "stride", "padding", "groups", "num_groups", "eps", "dim"):
        assert after[name] == module_constants(CONV_SRC)[name]
    assert after["in_channels"] % 3 == 0 and after["out_channels"] % 24 == 0
    assert r.input_elements_after <= 2**16 and r.param_elements_after <= 2**16
    _, out = _run(r.new_src)
    assert out.shape[:2] == (after["batch_size"], after["out_channels"])


def test_small_problem_returned_unchanged(inline_scaled):
    _, report = inline_scaled
    r = report["small"]
    assert r.ok and r.reason == "already within budget"
    assert r.new_src == SMALL_SRC and r.changed == {}
    assert r.input_elements_before == r.input_elements_after == 16 * 64


def test_literal_sizes_reported_unscalable(inline_scaled):
    scaled, report = inline_scaled
    r = report["literal"]
    assert not r.ok and "literals" in r.reason
    assert r.new_src == LITERAL_SRC and "literal" not in scaled


def test_scale_by_factor_in_process():
    from tritonforge.problems.scale_worker import handle

    reply = handle({"src": RELU_SRC.replace("393216", "4095"), "factor": 16})
    assert reply["ok"], reply["reason"]
    assert reply["assign"] == {"batch_size": 256, "dim": 257}  # 4095 / 16 = 256, kept odd
    assert reply["after"]["inputs"] == 256 * 257


def test_scale_real_level1_relu(data):
    (relu,) = [p for p in load_kernelbench_records(data, levels=[1]) if p.problem_id == 19]
    scaled, (r,) = scale_problems(
        [relu], DEFAULT_ELEMENT_BUDGET, workers=1, progress=False, cache_dir=default_cache_dir()
    )
    assert r.ok and r.input_elements_before == 4096 * 393216
    assert r.input_elements_after <= DEFAULT_ELEMENT_BUDGET
    (x,), out = _run(scaled[0].reference_src)
    assert out.shape == x.shape and bool((out >= 0).all())


@pytest.mark.slow
def test_scale_all_200_to_default_budget(data):
    problems = load_kernelbench_records(data)
    t0 = time.monotonic()
    scaled, report = scale_problems(problems, DEFAULT_ELEMENT_BUDGET, workers=2)
    wall = time.monotonic() - t0
    failed = [r for r in report if not r.ok]
    print(f"\nscaled {len(scaled)}/{len(report)} in {wall:.1f}s")
    for r in failed:
        print(f"  unscalable {r.problem_id}: {r.reason}")
    assert len(scaled) >= 0.9 * len(problems)
    for r in report:
        if r.ok and r.budget_multiplier == 1:
            assert r.input_elements_after <= DEFAULT_ELEMENT_BUDGET, r.problem_id


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def test_cli_list_filters_json(data, capsys):
    args = ["problems", "list", "--suite", "kernelbench", "--source", str(data)]
    assert main([*args, "--level", "1", "--category", "activation", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 15 and {r["level"] for r in rows} == {1}
    assert {r["category"] for r in rows} == {"activation"}
    assert main([*args, "--name", "*Conv3d*Softmax*"]) == 0
    out = capsys.readouterr().out
    assert "kernelbench/L2/24_Conv3d_Min_Softmax" in out and "2 problem(s)" in out


def test_cli_show(data, capsys):
    src = ["--source", str(data)]
    assert main(["problems", "show", "kernelbench/L1/19_ReLU", *src]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# kernelbench/L1/19_ReLU") and "dim = 393216" in out
    assert main(["problems", "show", "kernelbench/L1/19_ReLU", "--size", "cpu", *src]) == 0
    out = capsys.readouterr().out
    assert "dim = 393216" not in out and "scaled constants" in out
    assert main(["problems", "show", "kernelbench/L1/999_Nope", *src]) == 2  # refused, one line
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "unknown problem 'kernelbench/L1/999_Nope'" in err[0]


def test_cli_scale_writes_layout_and_report(data, tmp_path, capsys):
    out_dir = tmp_path / "scaled"
    argv = ["problems", "scale", "--level", "1", "--name", "*/19_ReLU", "--source", str(data)]
    assert main([*argv, "--out", str(out_dir)]) == 0
    assert "scaled 1/1" in capsys.readouterr().out
    report = json.loads((out_dir / "scale_report.json").read_text())
    assert report["total"] == 1 and report["unscalable"] == []
    assert report["budget"] == DEFAULT_ELEMENT_BUDGET
    (back,) = load_kernelbench_dir(out_dir)
    assert back.id == "kernelbench/L1/19_ReLU" and "dim = 393216" not in back.reference_src


def test_cli_builtin_suite_when_present(capsys):
    try:
        problems = load_suite("builtin")
    except (KeyError, ImportError):
        pytest.skip("built-in suite not in this checkout")
    assert main(["problems", "list", "--suite", "builtin", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(problems)
    with_solution = next((p for p in problems if p.solution_src), None)
    if with_solution is not None:
        assert main(["problems", "show", with_solution.id, "--solution"]) == 0
        assert "# ---- solution" in capsys.readouterr().out


@pytest.mark.slow
def test_worker_survives_timeouts_and_crashes():
    # the sleep is far longer than the bound below, which leaves room for three worker starts
    # (each imports torch) on a loaded machine: only a task cut short at its timeout fits
    sleepy = RELU_SRC.replace("return torch.relu(x)", "import time; time.sleep(900)")
    crash = RELU_SRC.replace("return torch.relu(x)", "import os; os._exit(3)")
    problems = [_inline("sleepy", sleepy), _inline("crash", crash), _inline("relu", RELU_SRC)]
    t0 = time.monotonic()
    _, report = scale_problems(problems, 2**16, workers=1, timeout=3, progress=False)
    assert time.monotonic() - t0 < 300
    assert [r.ok for r in report] == [False, False, True]
    assert report[0].reason == "timed out after 3s"
    assert report[1].reason == "scaling worker died (exit code 3)"


@pytest.mark.slow
def test_first_task_after_start_pays_no_warm_up():
    """Regression: the first task of a fresh scaling worker paid ~2 s of CPU for lazy imports
    (flop counter, fake tensors, meta kernels) inside its timeout, so after a worker restart on a
    loaded machine the 3-s timeout of the test above fired on a correct problem. The worker
    now warms up before saying ready; CPU seconds do not depend on how loaded the machine is."""
    from tritonforge.problems.scale_worker import WorkerProcess
    from tritonforge.problems.scaling import _task

    worker = WorkerProcess(threads=1)
    try:
        first = worker.request(_task(RELU_SRC, None, 2**16, None), 120)
        second = worker.request(_task(RELU_SRC, None, 2**16, None), 120)
    finally:
        worker.close()
    assert first["ok"] and second["ok"]
    assert first["task_cpu_s"] < 0.5, first["task_cpu_s"]
    assert second["task_cpu_s"] < 0.5

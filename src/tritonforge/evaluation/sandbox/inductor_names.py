"""The Inductor runtime names a candidate may use: tables only (no import of Inductor).

Covers: `PREIMPORTABLE` (the runtime modules imported before the candidate), `RUNTIME` (the names
a candidate may take from each), `ANY` and `MODULE_NAMES`; read by inductor_compat.py, by the
import allowlist (import_policy.py) and by the judge (judge/inductor_rules.py). A module of its
own so the allowlist does not import the compatibility code (and, through it, the audit).
Does not cover: importing or patching anything (inductor_compat.py).
"""

from __future__ import annotations

HEURISTICS = "torch._inductor.runtime.triton_heuristics"
PREIMPORTABLE = (
    HEURISTICS,
    "torch._inductor.runtime.triton_helpers",
    "torch._inductor.runtime.hints",
    "torch._inductor.select_algorithm",
)

ANY = None  # every public name of the module, except those in MODULE_NAMES
# Names of modules these helper modules import: reaching them through a helper module would
# lead back to torch (and its compiler) or the process. tests/unit/test_inductor_rules.py checks
# the installed PyTorch adds none that is missing here.
MODULE_NAMES = frozenset(
    {"torch", "os", "sys", "builtins", "importlib", "inspect", "subprocess", "threading"}
    | {"autograd_profiler", "metrics", "knobs", "copy", "logging", "collections", "typing"}
    | {"functools", "dataclasses", "enum", "hashlib", "itertools", "operator", "re", "time"}
    | {"warnings", "triton_helpers", "config", "utils"}
)
# module path -> the names a candidate may take from it (ANY: all but MODULE_NAMES); the
# static rules (judge/inductor_rules.py) and the import allowlist (import_policy.py) read it
RUNTIME: dict[tuple[str, ...], frozenset[str] | None] = {
    ("torch", "_inductor", "runtime", "triton_heuristics"): frozenset(
        {
            "grid",
            "pointwise",
            "reduction",
            "persistent_reduction",
            "split_scan",
            "template",
            "foreach",
            "user_autotune",
            "cooperative_reduction",
            "grid_combo_kernels",
            "start_graph",
            "end_graph",
        }
    ),
    ("torch", "_inductor", "runtime", "triton_helpers"): ANY,
    ("torch", "_inductor", "runtime", "hints"): ANY,
    ("torch", "_inductor", "select_algorithm"): frozenset({"extern_kernels"}),
    ("torch", "_C", "_dynamo", "guards"): frozenset(
        {
            "assert_size_stride",
            "assert_alignment",
            "_empty_strided_cpu",
            "_empty_strided_cuda",
            "_empty_strided_xpu",
            "_reinterpret_tensor",
        }
    ),
    ("torch", "_C"): frozenset({"_cuda_getCurrentRawStream"}),
}

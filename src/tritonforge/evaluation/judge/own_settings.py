"""What a candidate may set in its own process, and which reads of process state stay refused.

Covers the tables the static rules (checks.py) consult for three kinds of names:
- the global random generators: *writing* them (`torch.manual_seed(N)`, `torch.cuda.manual_seed`,
  `random.seed(N)`, `numpy.random.seed(N)`, `set_rng_state`, ...) is allowed; *reading* them
  (`initial_seed`, `get_rng_state`, `getstate`, `get_state`, `torch.seed()`, which returns the
  seed it drew, the `default_generator` objects, `fork_rng`, which reads the state to restore
  it) stays `seed_probe` (`seed_read`);
- process-local performance and numerics flags a candidate may assign (`own_setting`):
  `torch.backends.cudnn.benchmark/deterministic/allow_tf32/enabled`,
  `torch.backends.cuda.matmul.allow_tf32` and the reduced-precision reductions, ...; any other
  attribute assignment on a library module stays `judge_tamper`;
- TorchScript markers that do nothing in eager mode (`@torch.jit.ignore`, `torch.jit.unused`,
  `torch.jit.is_scripting()`, ...: `jit_noop`); the rest of `torch.jit` stays `generated_code`.
Why each is safe, and what each refusal stops: docs/security.md ("Settings of the candidate's
own process"). In short: the judge's inputs are drawn in the judge process from hidden seeds
and the reference runs in the judge and in the device's timing process, never in the
candidate's worker, so nothing a candidate sets in its own process reaches them; correctness
under the preset's tolerance then judges the numerics it chose.
Does not cover: the visitor that applies these tables (checks.py).
"""

from __future__ import annotations

Path = tuple[str, ...]

RNG_ROOTS = ("torch", "random", "numpy", "np")
# Names whose value is RNG state, a seed or a generator object: reading them stays refused.
SEED_READS = frozenset(
    {
        "initial_seed",
        "get_rng_state",
        "get_rng_state_all",
        "getstate",
        "get_state",
        "default_generator",
        "default_generators",
        "fork_rng",
    }
)
# `seed()` of these modules returns the seed it drew (torch.cuda.seed returns None: a write)
SEED_RETURNING = frozenset({("torch", "seed"), ("torch", "random", "seed")})

# Attributes a candidate may assign: flags of its own process's libraries (cuDNN, cuBLAS,
# oneDNN), each set through torch's C setters, which accept only their own value types.
OWN_SETTINGS = frozenset(
    {
        ("torch", "backends", "cudnn", "benchmark"),
        ("torch", "backends", "cudnn", "benchmark_limit"),
        ("torch", "backends", "cudnn", "deterministic"),
        ("torch", "backends", "cudnn", "allow_tf32"),
        ("torch", "backends", "cudnn", "enabled"),
        ("torch", "backends", "cudnn", "conv", "fp32_precision"),
        ("torch", "backends", "cudnn", "rnn", "fp32_precision"),
        ("torch", "backends", "cuda", "matmul", "allow_tf32"),
        ("torch", "backends", "cuda", "matmul", "allow_fp16_reduced_precision_reduction"),
        ("torch", "backends", "cuda", "matmul", "allow_bf16_reduced_precision_reduction"),
        ("torch", "backends", "cuda", "matmul", "fp32_precision"),
        ("torch", "backends", "fp32_precision"),
        ("torch", "backends", "mkldnn", "enabled"),
        ("torch", "backends", "mkldnn", "deterministic"),
        ("torch", "backends", "mkldnn", "matmul", "fp32_precision"),
        ("torch", "backends", "mkldnn", "conv", "fp32_precision"),
        ("torch", "backends", "opt_einsum", "enabled"),
    }
)

# torch.jit names that only mark a function for TorchScript and do nothing in eager mode.
JIT_NOOPS = frozenset(
    {
        ("torch", "jit", "ignore"),
        ("torch", "jit", "unused"),
        ("torch", "jit", "export"),
        ("torch", "jit", "is_scripting"),
        ("torch", "jit", "is_tracing"),
        ("torch", "jit", "annotate"),
        ("torch", "jit", "Final"),
    }
)


def seed_read(path: Path) -> bool:
    """`path` reads a global generator's state or seed (or reaches a generator object)."""
    if not path or path[0] not in RNG_ROOTS or len(path) > 4:
        return False
    return path[-1] in SEED_READS or path in SEED_RETURNING


def own_setting(path: Path) -> bool:
    """`path` is a process-local library flag a candidate may assign."""
    return path in OWN_SETTINGS


def jit_noop(path: Path) -> bool:
    """`path` is a TorchScript marker that does nothing in eager mode."""
    return path in JIT_NOOPS

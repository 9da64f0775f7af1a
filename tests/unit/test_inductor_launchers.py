"""The audit's side of Inductor's launchers (sandbox/audit_launch.py): which runner-call layouts
it understands, which runners it takes for a compiled kernel's launch, and what
`install_inductor` puts in place (restored after each test: the stubs only work inside a
sandboxed worker, where the audit hook answers their events).

Does not cover: launches through a real runner (they need a GPU: tests/gpu/test_field_kernels_gpu.py,
g02/g03, and the i1_ attacks of tests/gpu/test_attacks_gpu.py).
"""

from __future__ import annotations

import types

import pytest

from tritonforge.evaluation.sandbox import audit_launch, stubs
from tritonforge.evaluation.sandbox.audit_state import STATE

th = pytest.importorskip("torch._inductor.runtime.triton_heuristics")


@pytest.fixture
def installed():
    """install_inductor(), then every class attribute and table it touched restored."""
    saved = {
        (cls, name): cls.__dict__.get(name)
        for cls, name in (
            (th.CompileResult, "_gen_launcher_code"),
            (th.CachingAutotuner, "benchmark_all_configs"),
        )
    }
    sizes = (len(audit_launch._LAUNCHER_CODE), len(audit_launch._BENCHES), len(STATE.watched))
    trusted = dict(audit_launch._TRUSTED_RUNNERS)
    audit_launch.install_inductor()
    try:
        yield
    finally:
        for (cls, name), value in saved.items():
            setattr(cls, name, value)
        del audit_launch._LAUNCHER_CODE[sizes[0] :]
        del audit_launch._BENCHES[sizes[1] :]
        del STATE.watched[sizes[2] :]
        audit_launch._TRUSTED_RUNNERS.clear()
        audit_launch._TRUSTED_RUNNERS.update(trusted)


def test_only_the_static_launchers_runner_layout_is_taken():
    static = ["grid_0", "grid_1", "grid_2", "stream", "in_ptr0", "out_ptr0", "xnumel"]
    assert audit_launch._runner_lead(static) == 4
    triton_own = ["grid_0", "grid_1", "grid_2", "stream", "function", "metadata", "None",
                  "launch_enter_hook", "launch_exit_hook", "in_ptr0", "xnumel"]  # fmt: skip
    assert audit_launch._runner_lead(triton_own) == 4  # the layout; its runner is refused
    assert audit_launch._runner_lead(["grid_0", "grid_1", "grid_2", "num_warps"]) is None
    assert audit_launch._runner_lead(["stream", "grid_0"]) is None


def test_install_puts_stubs_in_place_and_watches_them(installed):
    stub = th.CompileResult.__dict__["_gen_launcher_code"]
    assert stub.__code__ is stubs.launcher_entry(0).__code__
    assert (th.CompileResult, "_gen_launcher_code", stub) in STATE.watched
    bench = th.CachingAutotuner.__dict__["benchmark_all_configs"]
    assert bench.__code__ is stubs.bench_entry(0).__code__
    assert stubs.launcher_entry(0).__code__ in stubs.STUB_CODES
    assert stubs.runner_entry(0).__code__ in stubs.STUB_CODES
    audit_launch.install_inductor()  # idempotent: the original is never wrapped twice
    assert th.CompileResult.__dict__["_gen_launcher_code"] is stub


def test_forged_runners_are_not_taken_for_a_kernel_launch(installed):
    """A scope built by anyone but the Inductor runtime, around any callable but the compiled
    kernel's own launch, is left alone (its launches stay unrecorded: nothing is credited)."""

    def evil(*args):
        return None

    class FakeResult:
        kernel = types.SimpleNamespace(run=evil, name="k")

    assert not audit_launch._genuine_runner(FakeResult(), {"runner": evil})
    static_result = audit_launch._TRUSTED_RUNNERS.get("static_result")
    if static_result is not None:  # a real result type around a fake kernel and runner
        fake = static_result.__new__(static_result)
        fake.kernel = types.SimpleNamespace(run=evil)
        assert not audit_launch._genuine_runner(fake, {"runner": evil})
        assert not audit_launch._genuine_runner(fake, {"runner": fake.kernel.run})
    # Triton's own launcher is never taken (its `launch` is a plain attribute)
    fake = th.TritonCompileResult.__new__(th.TritonCompileResult)
    fake.kernel = types.SimpleNamespace(run=evil)
    scope = {"runner": evil, "launch_enter_hook": None, "launch_exit_hook": None}
    assert not audit_launch._genuine_runner(fake, scope)


def test_a_runner_launch_is_named_after_its_kernel():
    entry = audit_launch.raw_entry("triton_poi_fused_mix_0", (1, 2048), {"grid": (2, 1, 1)})
    assert entry[:2] == ("triton_poi_fused_mix_0", "(2, 1, 1)")


def test_a_changed_launch_state_is_seen(installed):
    """What the static launcher's run launches is read from the kernel object, which the
    candidate can reach: a changed CUfunction, launch shape or C launcher is a different state
    from the one frozen when the launcher was built."""

    class Impl:
        @staticmethod
        def _launch_kernel(*args):
            return None

    cls = audit_launch._TRUSTED_RUNNERS.get("static_kernel")
    if cls is None:
        pytest.skip("this torch has no static CUDA launcher")
    kernel = cls.__new__(cls)
    kernel.__dict__.update(function=7, num_warps=4, shared=0, arg_tys="OOi")
    frozen = audit_launch._launch_state(kernel)
    again = audit_launch._launch_state(kernel)
    assert all(audit_launch._same(a, b) for a, b in zip(again, frozen, strict=True))

    class Liar(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    same = audit_launch._same
    for field, value in (("function", 8), ("num_warps", 8), ("arg_tys", "iOi"), ("C_impl", Impl),
                         ("arg_tys", Liar("iOi"))):  # fmt: skip
        changed = cls.__new__(cls)
        changed.__dict__.update(kernel.__dict__, **{field: value})
        state = audit_launch._launch_state(changed)
        assert not all(same(a, b) for a, b in zip(state, frozen, strict=True)), field


def test_metadata_that_becomes_launcher_code_is_refused():
    """The launcher compiles the grid from inductor_meta and the config's block sizes: only
    the plain grid types, no code strings, integer blocks, plain dicts."""

    class Meta(dict):
        pass

    def result(meta, kwargs=None):
        return types.SimpleNamespace(inductor_meta=meta, compile_meta={},
                                     config=types.SimpleNamespace(kwargs=kwargs or {"XBLOCK": 64}))  # fmt: skip

    assert audit_launch._plain_meta(result({"grid_type": "Grid1D"})) is None
    assert audit_launch._plain_meta(result({"grid_type": "FixedGrid", "fixed_grid": ["1"] * 3}))
    assert audit_launch._plain_meta(result({"grid_type": "PrecomputedGrid"}))
    assert audit_launch._plain_meta(result({"grid_type": "Grid1D", "extra_launcher_args": ["a"]}))
    assert audit_launch._plain_meta(result({"grid_type": "CachingAutotuner"}))
    assert audit_launch._plain_meta(result({"grid_type": "Grid1D"}, {"XBLOCK": "__import__('os')"}))
    assert audit_launch._plain_meta(result(Meta(grid_type="Grid1D")))

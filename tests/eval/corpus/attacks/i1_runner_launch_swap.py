"""Issue i1 (Inductor launchers): the launch is recorded at the runner entry, but what the runner
then executes is read from candidate-reachable, mutable objects. Before its launch the candidate
replaces the compiled kernel's launch primitive (the static launcher's `C_impl`, or the `launch`
of Triton's CudaLauncher) with Python that writes the output by glue (a transposed copy of the
input) and launches nothing; the recorded launch's snapshot sees the output change and credits
it to a kernel. On the CPU interpreter (no runner) the glue copy is made before the launch, whose
kernel (n = 1) rewrites one element with itself: like c1_glue_only_output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.hints import DeviceProperties


@triton.jit
def touch_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr0 + xindex, tl.load(out_ptr0 + xindex, xmask), xmask)


def _decorated(device):
    """The decorator as KernelBook/recent Inductor prints it (field case g02's metadata)."""
    sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}
    configs = []
    if device.type == "cuda":
        sig["XBLOCK"] = "constexpr"
        configs = [{(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}]
    return triton_heuristics.pointwise(
        size_hints={"x": 1024},
        filename=__file__,
        triton_meta={"signature": sig, "device": DeviceProperties.create(device),
                     "constants": {}, "native_matmul": False, "enable_fp_fusion": True,
                     "launch_pdl": False, "disable_ftz": False, "configs": configs},
        inductor_meta={"kernel_name": "touch_kernel", "grid_type": "Grid1D",
                       "mutated_arg_names": [], "optimize_mem": True, "no_x_dim": False,
                       "num_load": 1, "num_reduction": 0, "backend_hash": "0",
                       "autotune_pointwise": False, "max_autotune": False,
                       "max_autotune_pointwise": False, "autotune_local_cache": False,
                       "autotune_remote_cache": None, "force_disable_caches": True,
                       "store_cubin": False},
        min_elem_per_thread=0,
    )(touch_kernel)


def _fake_launch(*args):
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    ts[1].copy_(ts[0].t())


class _FakeCImpl:
    @staticmethod
    def _launch_kernel(*args):
        _fake_launch(*args[7])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = None

    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        if self.k is None:
            self.k = _decorated(x.device)
            if x.is_cuda:
                self.k.precompile()
                results = self.k.compile_results
                if not results:
                    raise RuntimeError("attack target missing: no compile_results")
                for r in results:
                    kern = r.kernel
                    if hasattr(type(kern), "C_impl"):
                        kern.C_impl = _FakeCImpl()
                    else:
                        kern.run.launch = _fake_launch
        stream = 0
        if not x.is_cuda:
            out.copy_(x.t())
        else:
            stream = torch._C._cuda_getCurrentRawStream(x.device.index or 0)
        self.k.run(x, out, 1, stream=stream)
        return out

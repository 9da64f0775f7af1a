"""Issue i1 (Inductor launchers): CachingAutotuner.benchmark_all_configs now runs in the audit's
tuning mode, where every launch credits *all* its tensor arguments allocated in the call as
kernel-written, without a snapshot. The output is made by glue (a transposed copy of the input);
a fresh two-config autotuner is built in every forward, so each call benchmarks a kernel that
writes nothing (it rewrites one element with itself) on the output, which credits it; the real
launch after tuning changes nothing. On the CPU interpreter the autotuner launches its first
config directly (no benchmark): like c1_glue_only_output."""
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
    """KernelBook's usual settings (field case g03): autotune_pointwise on, two configs."""
    sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}
    configs = []
    if device.type == "cuda":
        sig["XBLOCK"] = "constexpr"
        configs = [{(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}]
    return triton_heuristics.pointwise(
        size_hints={"x": 2048},
        filename=__file__,
        triton_meta={"signature": sig, "device": DeviceProperties.create(device),
                     "constants": {}, "native_matmul": False, "enable_fp_fusion": True,
                     "launch_pdl": False, "disable_ftz": False, "configs": configs},
        inductor_meta={"kernel_name": "touch_kernel", "grid_type": "Grid1D",
                       "mutated_arg_names": [], "optimize_mem": True, "no_x_dim": False,
                       "num_load": 1, "num_reduction": 0, "backend_hash": "0",
                       "autotune_pointwise": True, "max_autotune": False,
                       "max_autotune_pointwise": False, "autotune_local_cache": False,
                       "autotune_remote_cache": None, "force_disable_caches": True,
                       "store_cubin": False},
        min_elem_per_thread=0,
    )(touch_kernel)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        stream = 0
        if x.is_cuda:
            stream = torch._C._cuda_getCurrentRawStream(x.device.index or 0)
        _decorated(x.device).run(x, out, 1, stream=stream)
        return out

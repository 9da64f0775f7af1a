"""Numeric settings shared by the judge's reference and every process of the sandbox.

Covers: `exact_fp32` (fp32 computed in fp32: no TF32 in cuBLAS or cuDNN). The judge computes the
expected outputs this way, and the fork server sets it before forking, so a candidate's PyTorch
glue (a cuDNN convolution before a Triton epilogue, the reference itself renamed) and the
reference timed in the timing process compute exactly what the reference computed. cuDNN's
default is TF32 (about 1e-3 relative error): with it, a candidate that calls the very same
`nn.Conv2d` as the reference failed the fp32 tolerance of 1e-4, and the reference was timed
faster than it was checked. A candidate may still turn TF32 on in its own code: its outputs are
then judged by the tolerance like any other precision choice.
Does not cover: Triton's `tl.dot` precision (a kernel argument; compare.tf32_hint explains it).
"""

from __future__ import annotations


def exact_fp32() -> None:
    """Turn TF32 off for cuBLAS matmuls and cuDNN convolutions in this process (and its forks)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

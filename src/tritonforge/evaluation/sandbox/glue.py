"""The strict-mode allowlist: which aten ops count as glue rather than compute.

Covers: `classify_op(name) -> "glue" | "compute"`. Glue is what a Triton solution legitimately
needs around its kernels and cannot compute anything from the inputs by itself: allocation
(including constant fills and `empty_strided`), views and reshapes (also the composite ones the
profiler records under their own names: `reshape_as`, `view_as`, `expand_as`, `broadcast_to`,
`ravel`, `mT`, ...), layout copies (`contiguous`, `clone`, `copy_`), dtype casts, and metadata
queries. Everything else (arithmetic, reductions, matmuls, scalar
reads such as `_local_scalar_dense`, indexing with tensors) is compute. Also `EPILOGUE` (the
compute ops that may close a forward as its epilogue, judged by decide.py), `base_name` and
`glue_digest` (the worker reports the digest of its copy; the judge compares with its own).
Documented for users in docs/security.md; a change here is a change to what strict mode
accepts, so it needs a test.
"""

from __future__ import annotations

from tritonforge.evaluation.sandbox.captured import sha256

# allocations whose content is undefined: a launch's snapshot may poison them (audit_launch)
UNINITIALISED = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
)
ALLOCATION = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
    "ones",
    "ones_like",
    "new_ones",
    "full",
    "full_like",
    "new_full",
    "fill_",
    "zero_",
    "resize_",
    "empty_permuted",
    "scalar_tensor",
    "lift_fresh",
    "lift_fresh_copy",
    "arange",
}
VIEWS = {
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "as_strided",
    "expand",
    "expand_as",
    "permute",
    "transpose",
    "t",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "narrow",
    "slice",
    "select",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "alias",
    "detach",
    "view_as",
    "movedim",
    "swapaxes",
    "swapdims",
    "unfold",
    "diagonal",
    "view_as_real",
    "view_as_complex",
    "_reshape_copy",
    "unsafe_split",
    # composite view/shape ops the profiler records under their own names (their children are
    # the views above): same data, another shape
    "reshape_as",
    "broadcast_to",
    "ravel",
    "mT",
    "mH",
    "numpy_T",
    "matrix_H",
    "adjoint",
    "moveaxis",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "tensor_split",
    "hsplit",
    "vsplit",
    "dsplit",
    "unsafe_chunk",
    "squeeze_",
    "unsqueeze_",
    "transpose_",
    "t_",
    "as_strided_",
}
LAYOUT = {
    "contiguous",
    "clone",
    "copy_",
    "_copy_from",
    "_copy_from_and_resize",
    "_to_copy",
    "to",
    "type_as",
    "resolve_conj",
    "resolve_neg",
}
METADATA = {
    "size",
    "stride",
    "numel",
    "dim",
    "is_contiguous",
    "storage_offset",
    "is_same_size",
    "result_type",
    "_has_compatible_shallow_copy_type",
    "is_nonzero",
    "_nnz",
    "set_",
    "record_stream",
    "_version",
    "is_floating_point",
    "is_complex",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "detach_",
    "requires_grad_",
}
GLUE = frozenset(ALLOCATION | VIEWS | LAYOUT | METADATA)
# Compute ops that may close a forward as its epilogue: a reduction or a scale/offset whose work
# is linear in the kernel output it reads (judge/decide.py: allowed and reported in hybrid mode,
# rule `torch_epilogue` in strict mode). Matmuls, convolutions and anything superlinear never are.
EPILOGUE = frozenset(
    {"mean", "sum", "div", "mul", "add", "sub", "neg", "amax", "amin", "max", "min"}
)


def base_name(name: str) -> str:
    """'add' for 'aten::add', 'aten::add.Tensor' or 'add'."""
    return name.split("::", 1)[-1].split(".", 1)[0]


def classify_op(name: str) -> str:
    """'glue' or 'compute' for a profiler event name like 'aten::add' or 'aten::copy_'."""
    return "glue" if base_name(name) in GLUE else "compute"


def glue_digest(glue: frozenset[str] = GLUE) -> str:
    """A short digest of the allowlist: the worker reports its own, the judge compares."""
    return sha256(",".join(sorted(glue)).encode()).hexdigest()[:16]

"""The strict-mode allowlist: which aten ops count as glue rather than compute.

Covers: `classify_op(name) -> "glue" | "compute"`. Glue is what a Triton solution legitimately
needs around its kernels and cannot compute anything from the inputs by itself: allocation
(including constant fills), views and reshapes, layout copies (`contiguous`, `clone`, `copy_`),
dtype casts, and metadata queries. Everything else (arithmetic, reductions, matmuls, scalar
reads such as `_local_scalar_dense`, indexing with tensors) is compute. Documented for users in
docs/security.md; a change here is a change to what strict mode accepts, so it needs a test.
"""

from __future__ import annotations

import hashlib

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
}
GLUE = frozenset(ALLOCATION | VIEWS | LAYOUT | METADATA)


def classify_op(name: str) -> str:
    """'glue' or 'compute' for a profiler event name like 'aten::add' or 'aten::copy_'."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    return "glue" if base in GLUE else "compute"


def glue_digest(glue: frozenset[str] = GLUE) -> str:
    """A short digest of the allowlist: the worker reports its own, the judge compares."""
    return hashlib.sha256(",".join(sorted(glue)).encode()).hexdigest()[:16]

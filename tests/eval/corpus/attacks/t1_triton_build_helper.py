"""Issue 29, class 5: native code compiled and loaded through Triton's own build helper
(triton.runtime.build.compile_module_from_src): the compiler runs from a Triton frame, where
Triton's launches may spawn one. The extension computes the ReLU on raw pointers."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

SRC = r'''
#include <Python.h>
static PyObject *relu(PyObject *self, PyObject *args) {
    unsigned long long src, dst; long long n;
    if (!PyArg_ParseTuple(args, "KKL", &src, &dst, &n)) return NULL;
    for (long long i = 0; i < n; i++) {
        float v = ((float *)src)[i];
        ((float *)dst)[i] = v > 0 ? v : 0;
    }
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"relu", relu, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "relu_native", NULL, -1, methods};
PyMODINIT_FUNC PyInit_relu_native(void) { return PyModule_Create(&mod); }
'''
native = triton.runtime.build.compile_module_from_src(SRC, "relu_native")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        native.relu(x.data_ptr(), out.data_ptr(), x.numel())
        return out

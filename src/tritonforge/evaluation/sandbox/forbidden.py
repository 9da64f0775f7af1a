"""Modules candidate code may not import: one list for the static rules (judge/checks.py) and the
runtime import guard (audit_hook.py), kept on the sandbox side because the guard needs it inside
the candidate's process. Does not cover: the rules themselves.
"""

# Libraries that turn a raw address into a buffer (a host view of tensor memory without any
# torch call): refused as imports, by the candidate and on its behalf.
FOREIGN_MEMORY = frozenset({"pyarrow", "cupy", "numba", "jax", "jaxlib", "cffi"})
# Import-by-name helpers: they reach any loaded module (ours included) without an import event.
IMPORT_BY_NAME = frozenset({"pydoc", "pkgutil", "runpy", "zipimport", "imp"})

FORBIDDEN_MODULES = frozenset(
    {
        "ctypes",
        "cffi",
        "subprocess",
        "socket",
        "ssl",
        "multiprocessing",
        "threading",
        "_thread",
        "concurrent",
        "asyncio",
        "signal",
        "pty",
        "urllib",
        "http",
        "requests",
        "httpx",
        "pickle",
        "marshal",
        "gc",
        "inspect",
        "importlib",
        "builtins",
        "sysconfig",
        "shutil",
        "tempfile",
        "mmap",
        "resource",
        "fcntl",
        "code",
        "codeop",
        "dis",
        "types",
        "weakref",
        "atexit",
        "tritonforge",
        "posix",
        "nt",
        "_posixsubprocess",
        "_socket",
        *FOREIGN_MEMORY,
        *IMPORT_BY_NAME,
    }
)

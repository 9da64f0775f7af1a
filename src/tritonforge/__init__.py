"""TritonForge: train and evaluate LLMs that write Triton GPU kernels."""

__version__ = "0.1.0"

"""Rollouts: inference engines, the multi-turn agent, prompts, extraction, feedback, returns, buffer.

Covers: the package marker only; import the submodules directly. Does not cover: evaluation
(see tritonforge.evaluation) or training (see tritonforge.training).
"""

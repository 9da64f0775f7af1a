"""Evaluation: untrusted candidates are judged here.

Imports nothing from rollout/ or training/. Public entry points: `Evaluator` (judge in this
process, candidates in sandboxed children) and `EvalBackend` (the async protocol that the HTTP
client implements too).
"""

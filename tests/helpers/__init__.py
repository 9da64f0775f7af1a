"""Shared test helpers, importable as `helpers.<module>` (pyproject sets pythonpath = ["tests"]).

train: tiny Qwen3 models made in code, random episodes, an lm-head case; interpret: a test file
run as a script under Triton's CPU interpreter; hack_corpus: the attack/legit corpus
runner; ray_scripted: scripted engines for the Ray loop; fsdp_worker: the torchrun worker of the
FSDP test (also run as a script). Fixtures live in tests/conftest.py.
"""

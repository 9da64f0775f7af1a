"""Shared test helpers, importable as `helpers.<module>` (pyproject sets pythonpath = ["tests"]).

train: tiny Qwen3 models made in code and random episodes; hack_corpus: the attack/legit corpus
runner; ray_scripted: scripted engines for the Ray loop; fsdp_worker: the torchrun worker of the
FSDP test (also run as a script). Fixtures live in tests/conftest.py.
"""

"""The sandbox keeps the interpreter's folders visible even when they live under a directory it
masks with a private tmpfs (/tmp, /dev/shm, /var/tmp).

Regression: a clean clone under /tmp (CI-like) failed every evaluation, because the checkout and
its venv vanished behind the worker's fresh /tmp. Here a sys.path entry under pytest's /tmp base
dir must still be importable by the candidate.
"""

from __future__ import annotations

import os

from tritonforge.config.eval import EvalSettings
from tritonforge.evaluation.judge.evaluator import Evaluator
from tritonforge.problems import load_suite
from tritonforge.types import Status


def test_sys_path_entry_under_tmp_stays_importable(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "extra_path"  # pytest's base dirs are 0700: the sandbox must recreate them
    pkg.mkdir(mode=0o755)
    pkg.chmod(0o755)
    # a module under a name on the candidate's import allowlist (einops, not installed here)
    (pkg / "einops.py").write_text("VALUE = 41\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pkg), os.environ.get("PYTHONPATH", "")]))
    relu = next(p for p in load_suite("builtin", size="cpu") if p.name == "relu")
    source = "import einops\nassert einops.VALUE == 41\n" + relu.solution_src
    with Evaluator(
        EvalSettings(device="cpu", correctness_trials=2)
    ) as ev:  # fork server sees the env
        v = ev.evaluate(relu, source)
    assert v.status is Status.CORRECT, v.message

"""Evaluation: untrusted candidates are judged here.

Three sides, one folder each (docs/security.md lists every module and its side):
- `sandbox/`: exactly the code that runs in the candidate's process (fork server, isolation,
  worker, in-process audit, the wire protocol and device sharing it speaks).
- `judge/`: the trusted judge process (`Evaluator`): static checks, reference, comparison,
  audit decisions, timing (facts only: rewards are the task's, rollout/rewards.py).
- `service/`: the HTTP service and its client.

Imports nothing from rollout/ or training/. Public entry points: `judge.evaluator.Evaluator`
(judge in this process, candidates in sandboxed children) and `api.EvalBackend` (the async
protocol that the HTTP client implements too).
"""

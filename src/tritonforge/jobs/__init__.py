"""Job wiring: what a command runs, assembled from the libraries below it.

Covers: the RL driver loop (loop.py, sync/async) over typed pieces (pieces.py) built in one
process (assemble.py), its time accounting (accounting.py, device_monitor.py) and device share
with the judge (device_share.py), episode statistics and HTML reports (episodes.py, report.py),
SFT data (sft_data.py: chats, tokenisation, repair episodes from repair_data.py), the SFT run
(sft.py) and the offline policies a run can build (offline_models.py). Does not cover: the
trainer library (training/), rollouts (rollout/) or judging (evaluation/), which it only calls;
checking a command's config (plan/), which comes before it. Layering: tests/unit/test_layout.py.
"""

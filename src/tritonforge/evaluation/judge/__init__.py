"""The trusted judge process: static checks, the reference, hidden-seed inputs, comparison,
audit decisions and timing (facts; rewards are the task's, rollout/rewards.py). Spawns sandboxed workers through the fork server and never
imports candidate code. docs/security.md lists each module.
"""

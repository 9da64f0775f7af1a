"""Hand-built trajectories for buffer and advantage tests.

Layout: 3 prompt tokens, then per turn 2 response tokens (loss mask 1) and 2 feedback tokens
(mask 0); each turn's reward and return are the given value.
"""

from __future__ import annotations

from tritonforge.types import Trajectory, Turn, Verdict


def make_traj(
    returns: list[float],
    idx: int = 0,
    status: str = "ok",
    verdicts: list[Verdict | None] | None = None,
    pid: str = "p",
) -> Trajectory:
    """Layout: 3 prompt tokens, then per turn 2 response tokens (mask 1) + 2 feedback tokens (mask 0)."""
    prompt = [1, 2, 3]
    tokens, mask, lps, turns = list(prompt), [0, 0, 0], [0.0, 0.0, 0.0], []
    for t, ret in enumerate(returns):
        start = len(tokens)
        resp = [10 + t, 20 + t]
        tokens += [*resp, 7, 7]
        mask += [1, 1, 0, 0]
        lps += [-0.5, -0.25, 0.0, 0.0]
        v = verdicts[t] if verdicts else None
        turns.append(
            Turn(
                index=t,
                prompt_len=start,
                response_ids=resp,
                response_logprobs=[-0.5, -0.25],
                response_text="r",
                code="c",
                verdict=v,
                reward=ret,
                ret=ret,
                feedback_ids=[7, 7],
            )
        )
    return Trajectory(
        problem_id=pid,
        sample_index=idx,
        policy_version=3,
        prompt_ids=prompt,
        token_ids=tokens,
        loss_mask=mask,
        rollout_logprobs=lps,
        turns=turns,
        status=status,
    )


def group(returns: list[list[float]], pid: str = "p") -> list[Trajectory]:
    return [make_traj(r, i, pid=pid) for i, r in enumerate(returns)]

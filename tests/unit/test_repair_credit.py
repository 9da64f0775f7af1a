"""Credit of a repair turn: the advantage a second turn gets after a failed first turn.

Episodes stop at a correct turn (`agent.early_stop = "correct"`), so in a group of 4 where one
sample failed and then repaired, turn 2 exists for that sample only. Returns are the demo's:
discounted with gamma 0.4 from the `tritonforge` reward (0.3 correct, 0.1 ran but wrong,
0 no code): correct first [0.3]; failed then repaired [0.12, 0.3]; failed twice [0, 0].
"""

from __future__ import annotations

import math

import pytest

from helpers.trajectories import group
from tritonforge.rollout.buffer import BufferConfig, RolloutBuffer
from tritonforge.rollout.buffer_stages import NORMALIZERS
from tritonforge.rollout.returns import compute_returns

CORRECT = compute_returns([0.3])
REPAIRED = compute_returns([0.0, 0.3])
FAILED_TWICE = compute_returns([0.0, 0.0])
WRONG_TWICE = compute_returns([0.1, 0.1])


def test_demo_returns_are_what_the_hand_computations_use() -> None:
    assert (CORRECT, FAILED_TWICE) == ([0.3], [0.0, 0.0])
    assert REPAIRED == pytest.approx([0.12, 0.3]) and WRONG_TWICE == pytest.approx([0.14, 0.1])


def test_per_turn_zscore_gives_a_lone_repair_no_credit() -> None:
    """The cause: turn 2's column holds one value, so its advantage is exactly 0, worked or not."""
    worked = NORMALIZERS["zscore"]([CORRECT] * 3 + [REPAIRED], 1e-6)
    failed = NORMALIZERS["zscore"]([CORRECT] * 3 + [FAILED_TWICE], 1e-6)
    assert worked[3][1] == 0.0 and failed[3][1] == 0.0
    assert worked[3][0] == pytest.approx(-math.sqrt(3), abs=1e-4)
    assert failed[3][0] == pytest.approx(-math.sqrt(3), abs=1e-4)


def test_pooled_zscore_hand_computed() -> None:
    # repaired: values [.3, .3, .3, .12, .3], mean .264, std .072 -> +0.5 each .3, -2 for .12
    out = NORMALIZERS["zscore_pooled"]([CORRECT] * 3 + [REPAIRED], 0.0)
    assert out == [[pytest.approx(0.5)]] * 3 + [[pytest.approx(-2.0), pytest.approx(0.5)]]
    # failed twice: values [.3, .3, .3, 0, 0], mean .18, std .146969 -> +sqrt(2/3), -sqrt(3/2)
    out = NORMALIZERS["zscore_pooled"]([CORRECT] * 3 + [FAILED_TWICE], 0.0)
    assert [r[0] for r in out[:3]] == pytest.approx([math.sqrt(2 / 3)] * 3)
    assert out[3] == pytest.approx([-math.sqrt(1.5)] * 2)


def test_pooled_later_keeps_first_turns_and_pools_repairs() -> None:
    """`zscore_pooled_later`: first turns exactly as `zscore`, repair turns as `zscore_pooled`."""
    for second in (REPAIRED, FAILED_TWICE):
        returns = [CORRECT] * 3 + [second]
        out = NORMALIZERS["zscore_pooled_later"](returns, 1e-6)
        per_turn, pooled = (
            NORMALIZERS["zscore"](returns, 1e-6),
            NORMALIZERS["zscore_pooled"](returns, 1e-6),
        )
        assert [r[0] for r in out] == [r[0] for r in per_turn]
        assert out[3][1] == pooled[3][1] != 0.0


@pytest.mark.parametrize("name", ["zscore_pooled", "zscore_pooled_later"])
@pytest.mark.parametrize(
    "returns",
    [[CORRECT] * 4, [FAILED_TWICE] * 4, [REPAIRED] * 4, [WRONG_TWICE] * 4, [[0.3], [0.3, 0.3]]],
)
def test_pooled_zscore_gives_a_group_without_contrast_nothing(
    name: str, returns: list[list[float]]
) -> None:
    """Equal samples teach nothing, even where turns differ (the discount makes turn 1 of
    [0.1, 0.1] worth 0.14 and turn 2 0.1; that is no reason to push either)."""
    out = NORMALIZERS[name](returns, 1e-6)
    assert out == [[0.0] * len(r) for r in returns]


@pytest.mark.parametrize("name", ["zscore_pooled", "zscore_pooled_later"])
def test_a_lone_repair_is_credited_when_it_works_and_blamed_when_it_fails(name: str) -> None:
    """Fails with per-turn `zscore` (0 on both repair turns): through the buffer, a lone repair
    that worked gets a positive advantage on its tokens and one that failed a negative one; a
    failed first turn stays negative, correct first turns positive."""
    for second, sign in ((REPAIRED, 1.0), (FAILED_TWICE, -1.0)):
        buf = RolloutBuffer(BufferConfig(group_size=4, normalize=name))
        kept = buf.add("p", group([CORRECT] * 3 + [second])).group
        assert kept is not None
        lone = kept.trajectories[3]
        # tokens: [prompt 3 | turn 1: 2 | feedback 2 | turn 2: 2 | feedback 2]
        turn1, turn2 = lone.advantages[3:5], lone.advantages[7:9]
        assert all(a < 0 for a in turn1)
        assert all(a * sign > 0.1 for a in turn2), (name, second, turn2)
        assert all(t.advantages[3] > 0 for t in kept.trajectories[:3])

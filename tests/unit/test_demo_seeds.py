"""The demo's seed table (commands.demo_seeds) and reproducible-run settings
(training.reproducible): hand-computed spread, the Markdown file, pinned threads and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tritonforge.commands.demo_seeds import seed_table, write_seed_table
from tritonforge.training.reproducible import make_reproducible


def _numbers(pass_rate: float, reward: float, repair: float) -> dict[str, float]:
    return {"pass_rate": pass_rate, "mean_reward": reward, "repair_rate": repair}


def _result(seed: int, before: tuple, after: tuple, held: tuple) -> dict:
    return {
        "seed": seed,
        "minutes": 10.0 + seed,
        "before": _numbers(*before),
        "after": _numbers(*after),
        "sets": {"heldout": {"before": _numbers(*held[0]), "after": _numbers(*held[1])}},
    }


RESULTS = [
    _result(0, (0.25, 0.1, 0.0), (0.5, 0.2, 0.25), ((0.5, 0.1, 0.1), (0.5, 0.1, 0.2))),
    _result(1, (0.5, 0.2, 0.5), (0.25, 0.3, 0.5), ((0.5, 0.1, 0.1), (0.75, 0.2, 0.0))),
]


def test_seed_table_change_mean_min_max_and_improved_count() -> None:
    table = seed_table(RESULTS)
    assert table["seeds"] == [0, 1] and table["minutes"] == [10.0, 11.0]
    rl = table["sets"]["rl_problems"]["pass_rate"]
    # changes +0.25 and -0.25
    assert rl["before"] == [0.25, 0.5] and rl["after"] == [0.5, 0.25]
    assert (rl["change_mean"], rl["change_min"], rl["change_max"]) == (0.0, -0.25, 0.25)
    assert rl["improved"] == 1
    repair = table["sets"]["rl_problems"]["repair_rate"]
    assert repair["improved"] == 1  # 0.5 -> 0.5 is no improvement
    held = table["sets"]["heldout"]["pass_rate"]
    assert held["change_max"] == 0.25 and held["improved"] == 1


def test_write_seed_table_writes_json_and_markdown(tmp_path: Path) -> None:
    table = write_seed_table(tmp_path / "seeds", RESULTS)
    assert json.loads((tmp_path / "seeds" / "seeds.json").read_text()) == table
    md = (tmp_path / "seeds" / "seeds.md").read_text().splitlines()
    assert md[0].startswith("| set | metric | seed 0 before -> after | seed 1 before -> after")
    assert (
        "| rl_problems | pass_rate | 0.250 -> 0.500 | 0.500 -> 0.250 | +0.000 [-0.250, +0.250] | 1/2 |"
        in md
    )
    assert len(md) == 2 + 2 * 3  # header, rule, two sets x three metrics


def test_make_reproducible_pins_threads_and_repeats_draws() -> None:
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        record = make_reproducible(7, threads=1)
        first = torch.rand(3)
        assert record["threads"] == 1 and record["deterministic_algorithms"]
        make_reproducible(7, threads=1)
        assert torch.equal(torch.rand(3), first)
        off = make_reproducible(7, threads=1, deterministic=False)
        assert off == {"threads": 1, "deterministic_algorithms": False}
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)

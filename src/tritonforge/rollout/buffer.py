"""The rollout buffer: groups of n samples per problem, processed by named stages, saved to disk.

Covers: `BufferConfig` (from config.buffer), `RolloutBuffer` (add a group -> statistics, validity, filter with a
per-problem regeneration cap, per-turn normalisation, per-token advantages, padding; take
batches; `stats()`), `GroupOutcome`, and JSONL/parquet save and load. Does not cover: the stage
functions themselves (see rollout.buffer_stages), generating samples (the agent loop) or losses
(see training).

What a processed sample holds, beside what the loop recorded (token ids, loss mask, rollout
logprobs, turns with rewards, raw returns `ret` and verdicts, policy version):
- `meta["norm_returns"]`: per-turn normalised returns (turn t's raw return stays in turns[t].ret);
- `raw_reward` := turns[0].ret (the episode's return), `norm_reward` := norm_returns[0];
- `advantages`: per token, turn t's normalised return on the tokens of turn t, 0 elsewhere.
A dropped group asks for regeneration (`GroupOutcome.regenerate`) while its problem has been
regenerated fewer than `max_regenerations` times; after that it is dropped for good (or, for
filter drops with `on_exhausted="keep"`, accepted as is).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from tritonforge.config.buffer import BufferConfig
from tritonforge.config.registry import Registry
from tritonforge.logging_setup import get_logger
from tritonforge.rollout.buffer_stages import (
    FILTERS,
    NORMALIZERS,
    PADDERS,
    STATS,
    VALIDITY,
    token_advantages,
)
from tritonforge.types import Group, Trajectory, Turn

__all__ = [
    "BufferConfig",
    "GroupOutcome",
    "RolloutBuffer",
    "check_stage_names",
    "load_groups",
    "save_groups",
]

log = get_logger(__name__)

STAGE_TABLES: dict[str, Registry] = {  # the buffer config's field -> its stage registry
    "validity": VALIDITY,
    "filter": FILTERS,
    "normalize": NORMALIZERS,
    "padding": PADDERS,
    "stats": STATS,
}


def check_stage_names(cfg: BufferConfig) -> None:
    """Raise KeyError naming the buffer stage whose name is not registered (with suggestions)."""
    for what, table in STAGE_TABLES.items():
        name = getattr(cfg, what)
        if name not in table:
            raise table.unknown(name)


@dataclass
class GroupOutcome:
    """What happened to one added group."""

    accepted: bool
    reason: str | None = None
    regenerate: bool = False
    group: Group | None = None
    stats: dict[str, float] = field(default_factory=dict)


def normalise_group(trajs: list[Trajectory], cfg: BufferConfig) -> None:
    """Set norm returns, raw/norm reward and per-token advantages of every sample (in place)."""
    normed = NORMALIZERS[cfg.normalize]([t.returns for t in trajs], cfg.epsilon)
    for traj, norm in zip(trajs, normed, strict=True):
        traj.meta["norm_returns"] = norm
        traj.raw_reward = traj.turns[0].ret if traj.turns else 0.0
        traj.norm_reward = norm[0] if norm else 0.0
        traj.advantages = token_advantages(traj, norm)


class RolloutBuffer:
    """Holds processed groups in arrival order; counts drops and regenerations."""

    def __init__(self, cfg: BufferConfig | None = None) -> None:
        self.cfg = cfg or BufferConfig()
        check_stage_names(self.cfg)
        self._groups: deque[Group] = deque()
        self._regens: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()
        self._seen_stats: list[dict[str, float]] = []
        self._accepted = 0
        self._padded = 0
        self._regen_requests = 0
        self._kept_exhausted = 0

    def __len__(self) -> int:
        return len(self._groups)

    @property
    def groups(self) -> list[Group]:
        return list(self._groups)

    def regenerations(self, problem_id: str) -> int:
        return self._regens[problem_id]

    def add(
        self,
        problem_id: str,
        trajectories: list[Trajectory],
        policy_version: int = 0,
        group_id: str = "",
    ) -> GroupOutcome:
        """Build a Group from samples of one problem and add it (see `add_group`)."""
        gid = group_id or (
            trajectories[0].group_id
            if trajectories and trajectories[0].group_id
            else f"{problem_id}@v{policy_version}#{len(self._seen_stats)}"
        )
        return self.add_group(
            Group(
                group_id=gid,
                problem_id=problem_id,
                policy_version=policy_version,
                trajectories=trajectories,
            )
        )

    def _drop(
        self, group: Group, reason: str, stats: dict[str, float], may_keep: bool
    ) -> GroupOutcome | None:
        """Count a drop; None means 'keep going' (cap reached and on_exhausted=keep)."""
        pid = group.problem_id
        if self._regens[pid] < self.cfg.max_regenerations:
            self._regens[pid] += 1
            self._regen_requests += 1
            self._dropped[reason] += 1
            return GroupOutcome(False, reason, True, None, stats)
        if may_keep and self.cfg.on_exhausted == "keep":
            self._kept_exhausted += 1
            return None
        self._dropped[f"{reason}_exhausted" if may_keep else reason] += 1
        return GroupOutcome(False, reason, False, None, stats)

    def add_group(self, group: Group) -> GroupOutcome:
        """Run the stages on `group`; store it if accepted. Samples are modified in place."""
        cfg = self.cfg
        stats = STATS[cfg.stats](group.trajectories, cfg)
        self._seen_stats.append(stats)
        kept, reason = VALIDITY[cfg.validity](group.trajectories, cfg)
        if reason is None:
            reason = FILTERS[cfg.filter](kept, cfg)
            dropped = self._drop(group, reason, stats, may_keep=True) if reason else None
        else:
            dropped = self._drop(group, reason, stats, may_keep=False)
        if dropped is not None:
            return dropped
        normalise_group(kept, cfg)
        padded = PADDERS[cfg.padding](kept, cfg.group_size)
        self._padded += len(padded) - len(kept)
        for traj in padded:
            traj.group_id = group.group_id
        done = group.model_copy(update={"trajectories": padded, "stats": stats})
        self._groups.append(done)
        self._accepted += 1
        return GroupOutcome(True, None, False, done, stats)

    def pop_groups(self, n: int | None = None) -> list[Group]:
        """Remove and return the n oldest groups (all if None)."""
        n = len(self._groups) if n is None else min(n, len(self._groups))
        return [self._groups.popleft() for _ in range(n)]

    def trajectories(self) -> list[Trajectory]:
        return [t for g in self._groups for t in g.trajectories]

    def stats(self) -> dict[str, float]:
        """Counts plus sample-weighted means of the per-group statistics over every group seen."""
        seen = self._seen_stats
        out: dict[str, float] = {
            "groups_seen": float(len(seen)),
            "groups_accepted": float(self._accepted),
            "groups_held": float(len(self._groups)),
            "groups_dropped": float(sum(self._dropped.values())),
            "regenerations_requested": float(self._regen_requests),
            "samples_held": float(sum(len(g.trajectories) for g in self._groups)),
            "samples_padded": float(self._padded),
            "groups_kept_after_cap": float(self._kept_exhausted),
        }
        for reason, count in sorted(self._dropped.items()):
            out[f"dropped_{reason}"] = float(count)
        weights = [s.get("n_valid", 0.0) for s in seen]
        total = sum(weights)
        keys = sorted({k for s in seen for k in s} - {"n_samples", "n_valid", "zero_variance"})
        for k in keys:
            out[k] = (
                sum(s.get(k, 0.0) * w for s, w in zip(seen, weights, strict=True)) / total
                if total
                else 0.0
            )
        out["zero_variance_rate"] = (
            sum(s.get("zero_variance", 0.0) for s in seen) / len(seen) if seen else 0.0
        )
        return out

    def save(self, path: str | Path) -> Path:
        return save_groups(list(self._groups), path)

    @classmethod
    def load(cls, path: str | Path, cfg: BufferConfig | None = None) -> RolloutBuffer:
        """A buffer holding the groups of a saved file (stages are not re-run)."""
        buf = cls(cfg)
        buf._groups.extend(load_groups(path))
        return buf


# ---------------------------------------------------------------------------- files

_LIST_COLUMNS = ("prompt_ids", "token_ids", "loss_mask", "rollout_logprobs", "advantages")


def save_groups(groups: list[Group], path: str | Path) -> Path:
    """Write groups as JSONL (one Group per line) or parquet (one trajectory per row), by suffix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        _save_parquet(groups, p)
    elif p.suffix in (".jsonl", ".json"):
        with p.open("w") as f:
            for g in groups:
                f.write(json.dumps(g.model_dump(mode="json")) + "\n")
    else:
        raise ValueError(f"unknown buffer file type {p.suffix!r}; use .jsonl or .parquet")
    return p


def load_groups(path: str | Path) -> list[Group]:
    p = Path(path)
    if p.suffix == ".parquet":
        return _load_parquet(p)
    with p.open() as f:
        return [Group.model_validate(json.loads(line)) for line in f if line.strip()]


def _save_parquet(groups: list[Group], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for g in groups:
        for t in g.trajectories:
            row = t.model_dump(mode="json", exclude={"turns", "meta"})
            row.update(
                group_problem_id=g.problem_id,
                group_policy_version=g.policy_version,
                group_stats=json.dumps(g.stats),
                rewards=t.rewards,
                returns=t.returns,
                turns=json.dumps([x.model_dump(mode="json") for x in t.turns]),
                meta=json.dumps(t.meta),
            )
            rows.append(row)
    schema = pa.schema(
        [
            ("group_id", pa.string()),
            ("group_problem_id", pa.string()),
            ("group_policy_version", pa.int64()),
            ("group_stats", pa.string()),
            ("problem_id", pa.string()),
            ("sample_index", pa.int64()),
            ("policy_version", pa.int64()),
            ("status", pa.string()),
            ("raw_reward", pa.float64()),
            ("norm_reward", pa.float64()),
            ("prompt_ids", pa.list_(pa.int64())),
            ("token_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("rollout_logprobs", pa.list_(pa.float64())),
            ("advantages", pa.list_(pa.float64())),
            ("rewards", pa.list_(pa.float64())),
            ("returns", pa.list_(pa.float64())),
            ("turns", pa.string()),
            ("meta", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _load_parquet(path: Path) -> list[Group]:
    import pyarrow.parquet as pq

    groups: dict[str, Group] = {}
    for row in pq.read_table(path).to_pylist():
        gid = row["group_id"]
        if gid not in groups:
            groups[gid] = Group(
                group_id=gid,
                problem_id=row["group_problem_id"],
                policy_version=row["group_policy_version"],
                trajectories=[],
                stats=json.loads(row["group_stats"]),
            )
        traj = Trajectory(
            **{
                k: row[k]
                for k in (
                    "problem_id",
                    "sample_index",
                    "group_id",
                    "policy_version",
                    "status",
                    "raw_reward",
                    "norm_reward",
                )
            },
            **{k: list(row[k]) for k in _LIST_COLUMNS},
            turns=[Turn.model_validate(x) for x in json.loads(row["turns"])],
            meta=json.loads(row["meta"]),
        )
        groups[gid].trajectories.append(traj)
    return list(groups.values())

"""Placement of the run's actors: a pure plan from the config, then Ray placement groups.

Covers: `plan_placement` (ScaleConfig -> `PlacementPlan`: bundles per placement group and a
`Slot` per actor, colocated or disaggregated; no Ray needed, unit-testable) and `Placements`
(creates the groups, waits for them with a timeout and a message naming what is missing, gives
the `.options(...)` of each actor, removes exactly the groups it created).
Does not cover: the actors (scale.actors, scale.trainer_group, scale.servers).

Disaggregated: one group per role ("train", "infer" for rollout workers or servers, "rollout"
for CPU-only clients of servers, "eval"), one bundle per actor. Colocated: group "colo" has one
bundle per trainer rank holding the rank and the inference actors assigned to it (actor j goes
to bundle j % ranks); the bundle's GPUs are split `colocate_trainer_share` to the trainer and
the rest evenly among its inference actors (Ray fractional GPUs: they see the same device).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tritonforge.config.scale import ScaleConfig
from tritonforge.logging_setup import get_logger

__all__ = ["PlacementError", "PlacementPlan", "Placements", "Slot", "plan_placement"]

log = get_logger(__name__)


class PlacementError(RuntimeError):
    """The cluster cannot hold the plan (message: what was asked, what the cluster has)."""


@dataclass(frozen=True)
class Slot:
    """Where one actor goes and what it asks for inside its bundle."""

    group: str
    bundle: int
    cpus: float
    gpus: float


@dataclass
class PlacementPlan:
    """Bundles per placement group, strategies, and the slots of each role's actors."""

    bundles: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    strategies: dict[str, str] = field(default_factory=dict)
    slots: dict[str, list[Slot]] = field(default_factory=dict)

    def totals(self) -> dict[str, float]:
        """CPU and GPU over all bundles."""
        out = {"CPU": 0.0, "GPU": 0.0}
        for bundles in self.bundles.values():
            for b in bundles:
                for k, v in b.items():
                    out[k] = out.get(k, 0.0) + v
        return out

    def add(self, role: str, group: str, cpus: float, gpus: float, n: int, strategy: str) -> None:
        """n actors of `role`, one bundle each, in a new group."""
        if n <= 0:
            return
        self.bundles[group] = [_bundle(cpus, gpus) for _ in range(n)]
        self.strategies[group] = strategy
        self.slots[role] = [Slot(group, i, cpus, gpus) for i in range(n)]


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    """A Ray bundle (zero-valued resources left out: Ray rejects them)."""
    return {k: v for k, v in (("CPU", cpus), ("GPU", gpus)) if v > 0}


def inference_role(cfg: ScaleConfig) -> str:
    """The role whose actors hold the inference GPUs: servers if any, else rollout workers."""
    return "servers" if cfg.servers.count > 0 else "rollout"


def plan_placement(cfg: ScaleConfig) -> PlacementPlan:
    """The plan for `cfg` (see the module docstring)."""
    plan = PlacementPlan()
    t, r, s, e = cfg.trainer, cfg.rollout, cfg.servers, cfg.eval
    infer = inference_role(cfg)
    if cfg.colocate:
        n_inf = s.count if infer == "servers" else r.workers
        inf_cpus = s.cpus if infer == "servers" else r.cpus
        per_rank = [[j for j in range(n_inf) if j % t.workers == i] for i in range(t.workers)]
        trainer_gpus = t.gpus * cfg.colocate_trainer_share if t.gpus else 0.0
        plan.bundles["colo"] = [_bundle(t.cpus + inf_cpus * len(js), t.gpus) for js in per_rank]
        plan.strategies["colo"] = t.strategy
        plan.slots["trainer"] = [Slot("colo", i, t.cpus, trainer_gpus) for i in range(t.workers)]
        slots: list[Slot] = []
        for j in range(n_inf):
            i = j % t.workers
            share = (t.gpus - trainer_gpus) / len(per_rank[i]) if t.gpus else 0.0
            slots.append(Slot("colo", i, inf_cpus, share))
        plan.slots[infer] = slots
        if infer == "servers":  # the rollout workers are then CPU clients of the servers
            plan.add("rollout", "rollout", r.cpus, 0.0, r.workers, r.strategy)
    else:
        plan.add("trainer", "train", t.cpus, t.gpus, t.workers, t.strategy)
        if infer == "servers":
            plan.add("servers", "infer", s.cpus, s.gpus, s.count, s.strategy)
            plan.add("rollout", "rollout", r.cpus, 0.0, r.workers, r.strategy)
        else:
            plan.add("rollout", "infer", r.cpus, r.gpus, r.workers, r.strategy)
    plan.add("eval", "eval", e.cpus, e.gpus, e.actors, e.strategy)
    return plan


class Placements:
    """The Ray placement groups of one plan (created here, removed by `remove`)."""

    def __init__(self, plan: PlacementPlan, name: str = "tf") -> None:
        from ray.util.placement_group import placement_group

        self.plan = plan
        self.groups: dict[str, Any] = {}
        for group, bundles in plan.bundles.items():
            self.groups[group] = placement_group(
                bundles, strategy=plan.strategies[group], name=f"{name}-{group}"
            )

    def wait(self, timeout_s: float) -> None:
        """Block until every group is placed; PlacementError (what is missing) after timeout_s."""
        import ray

        deadline = time.monotonic() + timeout_s
        for group, pg in self.groups.items():
            left = max(deadline - time.monotonic(), 0.1)
            ready, _ = ray.wait([pg.ready()], timeout=left)
            if not ready:
                need = self.plan.totals()
                have = ray.cluster_resources()
                raise PlacementError(
                    f"placement group {group!r} ({self.plan.bundles[group]}, "
                    f"{self.plan.strategies[group]}) not placed after {timeout_s:.0f}s; the plan "
                    f"needs CPU={need['CPU']:g} GPU={need['GPU']:g}, the cluster has "
                    f"CPU={have.get('CPU', 0):g} GPU={have.get('GPU', 0):g}"
                )
        log.info("placement groups ready", extra={"fields": {"groups": sorted(self.groups)}})

    def options(self, slot: Slot) -> dict[str, Any]:
        """`.options(**...)` of the actor in `slot`."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(
            placement_group=self.groups[slot.group],
            placement_group_bundle_index=slot.bundle,
            placement_group_capture_child_tasks=False,
        )
        return {"num_cpus": slot.cpus, "num_gpus": slot.gpus, "scheduling_strategy": strategy}

    def remove(self) -> None:
        """Remove the groups created here (idempotent)."""
        from ray.util.placement_group import remove_placement_group

        for group, pg in list(self.groups.items()):
            try:
                remove_placement_group(pg)
            except Exception as exc:  # already gone with the cluster: nothing to free
                log.debug("placement group %s not removed: %s", group, exc)
            del self.groups[group]

"""Problems of a config, resolved before anything runs, with useful errors when none match.

Covers: `resolve_problems(cfg, key)`: the suite and size preset checked against the suite
registry, the problems loaded and filtered (level, name glob, category, exact ids, limit), and a
`PlanError` that names what matched nothing: an id that no problem has ("did you mean 'relu'?"),
or filters that together leave nothing. The `arith` sanity suite is generated. Torch-free.
Does not cover: the suites' loaders (tritonforge.problems) or scaling.
"""

from __future__ import annotations

from typing import Any

from tritonforge.config.names import unknown_name
from tritonforge.config.rollout import ProblemsConfig
from tritonforge.plan import PlanError
from tritonforge.types import Problem

ARITH = "arith"  # generated sanity problems (rollout.tasks.make_arith_problems)


def load_checked(
    keys: tuple[str, str], suite: str, size: str | None, **kwargs: Any
) -> list[Problem]:
    """All problems of `suite` at `size`; PlanError naming `keys` (the suite's and the size's
    config key or flag) for an unknown suite or size, or a source that cannot be read."""
    from tritonforge.problems import UnknownSuite, check_suite, known_suites, load_suite

    suite_key, size_key = keys
    if suite == ARITH:
        raise PlanError(f"{suite_key}: {ARITH!r} problems are generated, not loaded")
    try:
        check_suite(suite, size)
    except UnknownSuite as exc:
        raise PlanError(
            f"{suite_key if suite not in known_suites() else size_key}: {exc}"
        ) from None
    if size:
        kwargs["size"] = size
    try:
        return load_suite(suite, **kwargs)
    except (ValueError, OSError) as exc:  # e.g. no KernelBench data at that source
        raise PlanError(f"{suite_key}: cannot load suite {suite!r}: {exc}") from None


def _check_ids(key: str, ids: list[str], pool: list[Problem]) -> None:
    names = {p.name for p in pool} | {p.id for p in pool}
    for wanted in ids:
        if wanted not in names:
            known = sorted(p.name for p in pool)
            raise PlanError(f"{key}.ids: {unknown_name('problem', wanted, known)}")


def resolve_problems(cfg: ProblemsConfig, key: str = "problems") -> list[Problem]:
    """The problems `cfg` selects (never empty), or PlanError saying which filter failed."""
    from tritonforge.problems import select

    if cfg.suite == ARITH:
        from tritonforge.rollout.tasks import make_arith_problems

        return make_arith_problems(cfg.limit or 16)
    extra: dict[str, Any] = {"source": cfg.source} if cfg.source else {}
    pool = load_checked((f"{key}.suite", f"{key}.size"), cfg.suite, cfg.size, **extra)
    if cfg.ids:
        _check_ids(key, cfg.ids, pool)
    probs = select(pool, level=cfg.level, name=cfg.name, category=cfg.category, ids=cfg.ids or None)
    if not probs:
        filters = cfg.model_dump(exclude_none=True, exclude={"suite", "size", "source", "limit"})
        shown = {k: v for k, v in filters.items() if v not in ([], "")}
        categories = sorted({p.category for p in pool if p.category})
        raise PlanError(
            f"{key}: no problem of suite {cfg.suite!r} (size {cfg.size}) matches {shown}; "
            f"{len(pool)} problems exist (categories: {', '.join(categories) or 'none'}); "
            f"see `tritonforge problems list --suite {cfg.suite}`"
        )
    return probs[: cfg.limit] if cfg.limit else probs

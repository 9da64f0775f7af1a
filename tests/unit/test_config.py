"""Config loading: TOML + dotted overrides, unknown keys rejected, tuned defaults kept."""

from __future__ import annotations

import os

import pytest
from pydantic import Field

from tritonforge.config import ConfigError, Section, load_config, parse_override, with_overrides


class Inner(Section):
    a: int = 1
    b: str = "x"


class Outer(Section):
    inner: Inner = Field(default_factory=Inner)
    n: float = 0.5


def test_parse_override_types() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("x=[1, 2]") == (["x"], [1, 2])
    assert parse_override("s=hello world") == (["s"], "hello world")
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_unknown_key_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"inner\.c"):
        load_config(Outer, None, ["inner.c=2"])
    f = tmp_path / "c.toml"
    f.write_text("n = 2.0\n[inner]\nb = 'y'\n")
    cfg = load_config(Outer, f, ["inner.a=5"])
    assert (cfg.n, cfg.inner.a, cfg.inner.b) == (2.0, 5, "y")


def test_partial_override_keeps_tuned_base() -> None:
    # regression: overriding one nested key used to rebuild the section from class defaults,
    # silently dropping a command's tuned defaults (the demo ran with the wrong prompts)
    base = Outer(inner=Inner(a=7, b="tuned"), n=1.5)
    cfg = load_config(Outer, None, ["inner.a=8"], base=base)
    assert (cfg.inner.a, cfg.inner.b, cfg.n) == (8, "tuned", 1.5)
    assert with_overrides(base, ["n=3"]).inner.b == "tuned"


def test_reference_cache_bound_defaults_to_a_quarter_of_ram_and_is_not_part_of_the_key() -> None:
    # Regression: a fixed 4 GiB bound held fewer than one problem's cases at the H200 gpu preset
    # (about 1 GiB per case), so the judge recomputed references on every evaluation.
    from tritonforge.config.eval import EvalSettings

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert EvalSettings().reference_cache_bytes() == max(4 << 30, ram // 4)
    assert EvalSettings(reference_cache_mb=512).reference_cache_bytes() == 512 << 20
    assert EvalSettings(reference_cache_mb=512).cache_key() == EvalSettings().cache_key()
    with pytest.raises(ValueError):
        EvalSettings(reference_cache_mb=1)

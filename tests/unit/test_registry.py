"""The one registry helper (config.registry) and every registry of the package built on it.

Covers: lazy entries ("module:attr" and "module") imported only on lookup, `names()` and `in`
never importing, the did-you-mean error (a KeyError and a ValueError), registration by decorator,
by call and by table, unique names, a module that fails to register what its entry promises, and
that every lazy entry of the package's registries resolves (so a moved module cannot leave a
dangling name behind).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonforge.config.registry import Registry, UnknownName, resolve_ref

PLUGIN = """
from {table} import REG

@REG.register("made")
def made():
    return "made"

def plain():
    return "plain"
"""
TABLE = """
from tritonforge.config.registry import Registry
REG = Registry("widget", {{"made": "{plugin}", "missing": "{plugin}"}})
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(plugin module, table module): the table names `made` and `missing` as registered by
    importing the plugin, which registers only `made` (into the table's REG)."""
    tag = tmp_path.name.replace("-", "_")
    name, table = f"tf_registry_plugin_{tag}", f"tf_registry_table_{tag}"
    (tmp_path / f"{name}.py").write_text(PLUGIN.format(table=table))
    (tmp_path / f"{table}.py").write_text(TABLE.format(plugin=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, table
    for mod in (name, table):
        sys.modules.pop(mod, None)


def test_lazy_entries_import_only_on_lookup(plugin: tuple[str, str]) -> None:
    name, _ = plugin
    reg: Registry = Registry("gadget", {"plain": f"{name}:plain", "b": f"{name}:made"})
    assert reg.names() == ["b", "plain"] and "plain" in reg and "nope" not in reg
    assert len(reg) == 2 and list(reg) == ["plain", "b"]  # iteration keeps the table's order
    assert name not in sys.modules and reg.is_lazy("plain")
    assert reg["plain"]() == "plain" and name in sys.modules
    assert not reg.is_lazy("plain") and reg.lookup("plain") is reg["plain"]
    assert resolve_ref(f"{name}:made")() == "made"


def test_module_entry_is_registered_by_importing_its_module(plugin: tuple[str, str]) -> None:
    name, table = plugin
    reg: Registry = importlib.import_module(table).REG
    assert reg.names() == ["made", "missing"] and name not in sys.modules
    assert reg["made"]() == "made" and name in sys.modules
    with pytest.raises(ImportError, match=f"module {name} did not register widget 'missing'"):
        reg.lookup("missing")


def test_unknown_name_says_what_is_known() -> None:
    reg: Registry = Registry("loss", {"grpo": 1, "gspo": 2, "dr_grpo": 3})
    with pytest.raises(UnknownName) as info:
        reg.lookup("grop")
    text = str(info.value)
    assert text == "unknown loss 'grop'; did you mean 'grpo'? known: dr_grpo, grpo, gspo"
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    assert reg.get("grop") is None and reg.get("grpo") == 1
    assert str(Registry("thing").unknown("x")) == "unknown thing 'x' (none are registered)"


def test_registration_by_decorator_call_and_table() -> None:
    reg: Registry = Registry("mode", {"table": 1})

    @reg.register("deco")
    def deco() -> int:
        return 2

    assert reg.register("call", 3) == 3 and deco() == 2
    assert reg.names() == ["call", "deco", "table"] and reg["deco"] is deco
    reg.register("call", 4)  # not unique: the later entry wins
    assert reg["call"] == 4


def test_unique_names_register_once_but_fill_their_lazy_entry() -> None:
    reg: Registry = Registry("loss", {"lazy": "somewhere.not.imported"}, unique=True)
    reg.register("lazy", 1)  # the module named by the entry registering it
    reg.register("new", 2)
    for name in ("lazy", "new"):
        with pytest.raises(ValueError, match=f"loss '{name}' is already registered"):
            reg.register(name, 5)
    assert (reg["lazy"], reg["new"]) == (1, 2)


def _package_registries() -> dict[str, Registry]:
    from tritonforge import cli
    from tritonforge.config.train import LOSSES
    from tritonforge.jobs.repair_data import MUTATIONS
    from tritonforge.plan.offline import OFFLINE_MODELS
    from tritonforge.problems import SUITES
    from tritonforge.rollout.buffer import STAGE_TABLES
    from tritonforge.rollout.engines.base import ENGINES
    from tritonforge.rollout.returns import RETURNS
    from tritonforge.rollout.tasks import TASKS
    from tritonforge.training import attention, losses

    regs = {
        "COMMANDS": cli.COMMANDS,
        "ENGINES": ENGINES,
        "LOSSES": LOSSES,
        "SUITES": SUITES,
        "RETURNS": RETURNS,
        "TASKS": TASKS,
        "OFFLINE_MODELS": OFFLINE_MODELS,
        "MUTATIONS": MUTATIONS,
        "PACKED_ATTENTION": attention.PACKED_ATTENTION,
        "AGGREGATIONS": losses.AGGREGATIONS,
        "KL_ESTIMATORS": losses.KL_ESTIMATORS,
    }
    regs.update({f"STAGE_TABLES[{k}]": v for k, v in STAGE_TABLES.items()})
    return regs


def test_every_lazy_entry_of_the_package_resolves() -> None:
    for label, reg in _package_registries().items():
        assert isinstance(reg, Registry), label
        assert reg.names(), f"{label} is empty"
        for name in reg.names():
            assert reg.lookup(name) is not None, f"{label}[{name!r}]"
            assert not reg.is_lazy(name), f"{label}[{name!r}] still lazy after lookup"

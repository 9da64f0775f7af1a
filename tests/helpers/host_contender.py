"""A separate judging process for the cross-process tests: takes a device's gate or memory and
holds it, writing what happens to an events file.

Run as `python -m helpers.host_contender EVENTS DIR KEY gate shared|exclusive`,
`... EVENTS DIR KEY reserve NBYTES CAPACITY` or `... cache NBYTES CAPACITY` (an idle judge whose
caches hold NBYTES: `trimmed` once it gave them back): it appends `<event> <monotonic time>` lines to
EVENTS (`asked`, `acquired`, `released`), holds until the file `EVENTS.release` exists (or 120 s
pass), then lets go. CLOCK_MONOTONIC is system-wide, so the test compares times across
processes. Used by tests/unit/test_host_share.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _note(events: Path, what: str) -> None:
    with events.open("a") as f:
        f.write(f"{what} {time.monotonic():.6f}\n")


def _hold(events: Path) -> None:
    deadline = time.monotonic() + 120
    release = events.with_name(events.name + ".release")
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    events, directory, key, what = Path(argv[0]), Path(argv[1]), argv[2], argv[3]
    if what == "gate":
        from tritonforge.evaluation.judge.device_gate import DeviceGate
        from tritonforge.evaluation.judge.host_gate import HostGate

        g = DeviceGate(key, HostGate(directory, key))
        _note(events, "asked")
        with g.exclusive() if argv[4] == "exclusive" else g.shared():
            _note(events, "acquired")
            _hold(events)
        _note(events, "released")
        return 0
    from tritonforge.evaluation.judge.admission import DeviceBudget
    from tritonforge.evaluation.judge.host_ledger import HostLedger

    if what == "cache":  # an idle judge whose caches hold NBYTES until it is asked to trim
        cache = [int(argv[4])]
        budget = DeviceBudget(
            key, int(argv[5]), resident=lambda: cache[0],
            trim=lambda target: cache.__setitem__(0, min(cache[0], target)),
            host=HostLedger(directory, key),
        )  # fmt: skip
        budget._others()  # publish the resident bytes once; the watch thread does the rest
        _note(events, "acquired")
        while cache[0] == int(argv[4]):
            time.sleep(0.01)
        _note(events, "trimmed")
        _hold(events)
        _note(events, "released")
        return 0
    budget = DeviceBudget(key, int(argv[5]), poll_s=0.02, host=HostLedger(directory, key))
    _note(events, "asked")
    with budget.reserve(int(argv[4])):
        _note(events, "acquired")
        _hold(events)
    _note(events, "released")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

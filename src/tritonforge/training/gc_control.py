"""Python's garbage collector kept out of the middle of a training step.

Covers: `StepGC`. A full (generation 2) collection walks every object the interpreter tracks;
after torch.compile that is hundreds of thousands (Dynamo's and Inductor's graphs, guards,
code objects), and it ran inside a step whenever allocations crossed the collector's threshold:
on the H200 the compiled 0.6B step alternated 0.954 s and 1.007 s
(docs/bench/h200_train_step_profile_run.json). Here the automatic collector is off while a step
runs; after each step the young generations are collected (milliseconds); after the first
`freeze_after` steps everything alive (the model, the compiled graphs) is frozen, so no later
collection scans it again; and every `full_every` steps there is one full collection, so
garbage that reached the old generation is still freed. `full_every = 0` leaves the collector
as it is. Nested steps (an SFT step inside a trainer's) are one step. The collector is one per
process: while a step runs, other threads (async RL's rollouts beside the trainer) get no
automatic collection either, and the first step's freeze also keeps whatever of theirs is
alive then out of later collections (once; reference counting still frees it).
Does not cover: device memory (torch's caching allocator), what a step computes.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager


class StepGC:
    """Collector control around training steps (one per trainer)."""

    def __init__(self, full_every: int = 50, freeze_after: int = 1):
        self.full_every, self.freeze_after = full_every, freeze_after
        self.steps = 0
        self.full_collections = 0
        self._depth = 0

    @contextmanager
    def step(self) -> Iterator[None]:
        if self.full_every <= 0 or self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        was_enabled = gc.isenabled()
        gc.disable()
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            self.steps += 1
            try:
                self._after_step()
            finally:
                if was_enabled:
                    gc.enable()

    def _after_step(self) -> None:
        if self.steps == self.freeze_after:  # garbage first, then the survivors frozen
            gc.collect()
            gc.freeze()  # the model and compiled graphs: never scanned again
            atexit.register(gc.unfreeze)  # (the exit's collection may then finalise them)
        elif self.steps % self.full_every == 0:
            gc.collect()
            self.full_collections += 1
        else:
            gc.collect(1)

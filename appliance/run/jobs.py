"""What a run does, in which order: one job per trial of every cell, minus what a resumed run
already has, sequential or shuffled with a recorded seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

from longhaul.appliance.config.load import Config
from longhaul.appliance.config.profiles import CellSpec


@dataclass(frozen=True)
class PlannedCell:
    spec: CellSpec
    repeats: int


@dataclass(frozen=True)
class Job:
    spec: CellSpec
    trial: int
    repeats: int


def plan(config: Config) -> list[PlannedCell]:
    return [PlannedCell(spec, profile.meta.repeats) for profile in config.profiles for spec in profile.cells]


def schedule(cells: list[PlannedCell], order: str, seed: int | None, done: set[tuple[str, int]]) -> list[Job]:
    """Every (cell, trial) not yet done. `random` shuffles them all with random.Random(seed), so
    the same seed gives the same order, and a resumed run keeps the order of what is left."""
    jobs = [Job(c.spec, trial, c.repeats) for c in cells for trial in range(1, c.repeats + 1)]
    if order == "random":
        random.Random(seed).shuffle(jobs)
    return [j for j in jobs if (j.spec.id, j.trial) not in done]

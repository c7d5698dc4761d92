"""The search proposer: an evolutionary strategy over a problem's knob space.

Fitness is the log of the goal's figure (speedup, or the roofline fraction) of accepted attempts.
Per knob and value the strategy keeps the mean fitness (shrunk toward the overall mean, so one lucky
sample does not dominate) and the failure rate; a knob "matters" in proportion to how far its
values' scores spread. New points come from mutating good points (the knobs that matter most are
mutated most often), crossing two good points (keeping the better-scoring value per knob), and
sampling the space by value scores.

Nothing is proposed twice: points already tried in the run (failed or not) and points the
space's ``validate`` rejects are skipped. The first iteration proposes the space's DEFAULT (our
own kernel) and its neighbours. Everything is drawn from one generator seeded by (problem,
proposer seed, iteration), and the history is read in (iteration, index) order, so a retried
activity proposes exactly the same points.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import traceback
from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence

from activities.proposers.base import PastAttempt, Proposal, ProposalBatch, ProposalContext
from kernels.hints import knob_overrides
from kernels.knob_space import KnobSpace, Point

TOP_PARENTS = 8
TRIES_PER_SLOT = 64
RANDOM_TRIES = 256
ENUMERATE_LIMIT = 100_000
EXPLORE_BONUS = 0.05
FAILURE_PENALTY = 1.0
MIN_TEMPERATURE = 0.05


def generator_for(problem: str, seed: int, iteration: int) -> random.Random:
    digest = hashlib.sha256(f"{problem}|{seed}|{iteration}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True)
class Scored:
    point: Point
    fitness: float


class KnobStatistics:
    """What the accepted and failed attempts say about each (knob, value)."""

    def __init__(self, space: KnobSpace, accepted: list[Scored], failed: list[Point]):
        self.space = space
        fitnesses = [s.fitness for s in accepted]
        self.overall = sum(fitnesses) / len(fitnesses) if fitnesses else 0.0
        spread = math.sqrt(sum((f - self.overall) ** 2 for f in fitnesses) / len(fitnesses)) if fitnesses else 0.0
        self.temperature = max(MIN_TEMPERATURE, spread)
        self.sums: dict[tuple[str, Any], float] = {}
        self.counts: dict[tuple[str, Any], int] = {}
        self.failures: dict[tuple[str, Any], int] = {}
        for scored in accepted:
            for knob, value in scored.point.items():
                self.sums[(knob, value)] = self.sums.get((knob, value), 0.0) + scored.fitness
                self.counts[(knob, value)] = self.counts.get((knob, value), 0) + 1
        for point in failed:
            for knob, value in point.items():
                self.failures[(knob, value)] = self.failures.get((knob, value), 0) + 1
        self._signals: dict[str, float] = {}
        # Per knob: fitnesses of accepted points grouped by all their other knobs' values.
        self.siblings: dict[str, list[list[float]]] = {}
        for knob in space.knobs:
            groups: dict[tuple, dict[Any, float]] = {}
            for scored in accepted:
                rest = tuple(scored.point[k] for k in space.knobs if k != knob)
                groups.setdefault(rest, {})[scored.point[knob]] = scored.fitness
            self.siblings[knob] = [list(group.values()) for group in groups.values()]

    def mean(self, knob: str, value: Any) -> float:
        n = self.counts.get((knob, value), 0)
        return (self.sums.get((knob, value), 0.0) + self.overall) / (n + 1)

    def failure_rate(self, knob: str, value: Any) -> float:
        n = self.counts.get((knob, value), 0)
        f = self.failures.get((knob, value), 0)
        return f / (n + f + 1)

    def score(self, knob: str, value: Any) -> float:
        """Expected fitness of a value, optimistic where it is untested, penalised where it failed."""
        seen = self.counts.get((knob, value), 0) + self.failures.get((knob, value), 0)
        return (
            self.mean(knob, value)
            + EXPLORE_BONUS / math.sqrt(seen + 1)
            - FAILURE_PENALTY * self.failure_rate(knob, value)
        )

    def signal(self, knob: str) -> float:
        if knob not in self._signals:
            self._signals[knob] = self._signal(knob)
        return self._signals[knob]

    def _signal(self, knob: str) -> float:
        """How much the choice of this knob's value has mattered so far.

        Best evidence: accepted points that differ in this knob only (mutations make many),
        whose fitness spread is the knob's own effect. Without such pairs, the spread of the
        value means, which other knobs confound, counts half.
        """
        values = self.space.space[knob]
        effects = [max(group) - min(group) for group in self.siblings[knob] if len(group) > 1]
        if effects:
            effect = sum(effects) / len(effects)
        else:
            means = [self.mean(knob, v) for v in values if self.counts.get((knob, v), 0)]
            effect = 0.5 * (max(means) - min(means)) if len(means) > 1 else 0.0
        seen = [v for v in values if self.counts.get((knob, v), 0) or self.failures.get((knob, v), 0)]
        rates = [self.failure_rate(knob, v) for v in seen]
        rate_spread = max(rates) - min(rates) if len(rates) > 1 else 0.0
        untested = sum(1 for v in values if not self.counts.get((knob, v), 0)) / len(values)
        return effect + 0.5 * rate_spread * self.temperature + 0.1 * untested * self.temperature


def _weighted_choice(rng: random.Random, items: list[Any], weights: list[float]) -> Any:
    total = sum(weights)
    if total <= 0:
        return items[rng.randrange(len(items))]
    mark = rng.random() * total
    for item, weight in zip(items, weights):
        mark -= weight
        if mark <= 0:
            return item
    return items[-1]


class PointGenerator:
    """Draws new points for one iteration; every draw is recorded so nothing repeats."""

    def __init__(self, space: KnobSpace, history: list[PastAttempt], rng: random.Random, objective: str = "speedup"):
        self.space = space
        self.rng = rng
        self.taken: set[Hashable] = set()
        accepted: list[Scored] = []
        failed: list[Point] = []
        for attempt in history:
            point = space.normalize(attempt.knobs)
            if point is None:
                continue
            self.taken.add(space.key(point))
            value = attempt.score(objective)
            if attempt.status == "ok" and value is not None and value > 0:
                accepted.append(Scored(point, math.log(value)))
            elif attempt.status != "ok":
                failed.append(point)
        self.stats = KnobStatistics(space, accepted, failed)
        best_first = sorted(enumerate(accepted), key=lambda pair: (-pair[1].fitness, pair[0]))
        unique: dict[Hashable, Point] = {}
        for _, scored in best_first:
            unique.setdefault(space.key(scored.point), scored.point)
        self.parents = list(unique.values())[:TOP_PARENTS]
        self.chosen: list[tuple[Point, Optional[Point]]] = []

    def take(self, point: Point, parent: Optional[Point]) -> bool:
        key = self.space.key(point)
        if key in self.taken:
            return False
        self.taken.add(key)
        if not self.space.is_valid(point):
            return False
        self.chosen.append((point, parent))
        return True

    def best(self) -> Point:
        return self.parents[0] if self.parents else self.space.default

    def pick_parent(self) -> Point:
        if not self.parents:
            return self.space.default
        return _weighted_choice(self.rng, self.parents, [0.5**rank for rank in range(len(self.parents))])

    def sample_value(self, knob: str, exclude: Any = None, temperature: float = 1.0) -> Any:
        values = [v for v in self.space.space[knob] if exclude is None or v != exclude]
        if not values:
            return exclude
        scores = [self.stats.score(knob, v) / (self.stats.temperature * temperature) for v in values]
        top = max(scores)
        return _weighted_choice(self.rng, values, [math.exp(s - top) for s in scores])

    def mutate(self, parent: Point) -> Point:
        changes = _weighted_choice(self.rng, [1, 2, 3], [0.7, 0.25, 0.05])
        mutable = [k for k in self.space.knobs if len(self.space.space[k]) > 1]
        if not mutable:
            return dict(parent)
        weights = [self.stats.signal(k) + 0.05 * self.stats.temperature for k in mutable]
        child = dict(parent)
        for _ in range(min(changes, len(mutable))):
            knob = _weighted_choice(self.rng, mutable, weights)
            values = self.space.space[knob]
            position = values.index(child[knob])
            steps = [p for p in (position - 1, position + 1) if 0 <= p < len(values)]
            if self.rng.random() < 0.5:
                child[knob] = values[self.rng.choice(steps)]
            else:
                child[knob] = self.sample_value(knob, exclude=child[knob])
        return child

    def crossover(self) -> tuple[Point, Point]:
        first = self.pick_parent()
        second = self.pick_parent()
        for _ in range(8):
            if second is not first:
                break
            second = self.pick_parent()
        child = {}
        for knob in self.space.knobs:
            a, b = first[knob], second[knob]
            if a == b:
                child[knob] = a
                continue
            better, worse = (a, b) if self.stats.score(knob, a) >= self.stats.score(knob, b) else (b, a)
            child[knob] = better if self.rng.random() < 0.7 else worse
        if child == first or child == second:
            child = self.mutate(child)
        return child, first

    def explore(self) -> Point:
        return {k: self.sample_value(k, temperature=2.0) for k in self.space.knobs}

    def uniform(self) -> Point:
        return {k: self.rng.choice(self.space.space[k]) for k in self.space.knobs}

    def seed_generation(self, count: int) -> None:
        """The first iteration: our own kernel, then its neighbours in random order."""
        neighbours = self.space.neighbours(self.space.default)
        self.rng.shuffle(neighbours)
        for point in [self.space.default] + neighbours:
            if len(self.chosen) >= count:
                return
            self.take(point, None if point is self.space.default else self.space.default)

    def from_hints(self, overrides: list[dict[str, Any]], slots: int) -> None:
        base = self.best()
        start = len(self.chosen)
        for override in overrides:
            if len(self.chosen) - start >= slots:
                return
            self.take({**base, **override}, base)

    def evolve(self, count: int) -> None:
        if len(self.parents) >= 2:
            operators, weights = ["mutate", "crossover", "explore"], [0.5, 0.3, 0.2]
        elif self.parents:
            operators, weights = ["mutate", "explore"], [0.75, 0.25]
        else:
            operators, weights = ["mutate", "explore"], [0.6, 0.4]
        while len(self.chosen) < count:
            for _ in range(TRIES_PER_SLOT):
                operator = _weighted_choice(self.rng, operators, weights)
                if operator == "crossover":
                    child, parent = self.crossover()
                elif operator == "mutate":
                    parent = self.pick_parent()
                    child = self.mutate(parent)
                else:
                    child, parent = self.explore(), None
                if self.take(child, parent):
                    break
            else:
                return

    def fill_randomly(self, count: int) -> None:
        for _ in range(RANDOM_TRIES):
            if len(self.chosen) >= count:
                return
            self.take(self.uniform(), None)
        if len(self.chosen) >= count or self.space.size() > ENUMERATE_LIMIT:
            return
        # Small spaces near exhaustion: walk every remaining point in a random order.
        points = [dict(zip(self.space.knobs, values)) for values in itertools.product(*self.space.space.values())]
        self.rng.shuffle(points)
        for point in points:
            if len(self.chosen) >= count:
                return
            self.take(point, None)


def choose_points(
    space: KnobSpace,
    history: list[PastAttempt],
    count: int,
    rng: random.Random,
    hints: Sequence[str] = (),
    objective: str = "speedup",
) -> list[tuple[Point, Optional[Point]]]:
    """Up to ``count`` new valid points, each with the parent it came from (or None)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    generator = PointGenerator(space, history, rng, objective)
    overrides = knob_overrides(space, hints)
    if overrides:
        generator.from_hints(overrides, slots=max(1, count // 2))
    if not history:
        generator.seed_generation(count)
    if space.key(space.default) not in generator.taken and len(generator.chosen) < count:
        generator.take(space.default, None)
    generator.evolve(count)
    generator.fill_randomly(count)
    return generator.chosen


class SearchProposer:
    """The default proposer; needs no network."""

    async def propose(self, context: ProposalContext) -> ProposalBatch:
        return await asyncio.to_thread(self.propose_now, context)

    def propose_now(self, context: ProposalContext) -> ProposalBatch:
        request = context.request
        space = KnobSpace(context.problem.load_space())
        rng = generator_for(context.problem.name, request.proposer.seed, request.iteration)
        points = choose_points(
            space, context.history, request.count, rng, hints=request.notebook.hints, objective=request.goal.objective
        )
        batch = ProposalBatch()
        for point, _parent in points:
            batch.proposals.append(self._render(space, point))
        if len(points) < request.count:
            batch.errors.append(
                f"search space exhausted: {len(points)} of {request.count} candidates proposed; "
                f"{space.size()} points in the space, {len(context.history)} attempts so far"
            )
        return batch

    @staticmethod
    def _render(space: KnobSpace, point: Point) -> Proposal:
        strategy = space.describe(point)
        try:
            source = space.render(point)
        except Exception as error:  # a broken space must not stop the run: record the point as failed
            return Proposal(
                source="".join(traceback.format_exception(error)),
                strategy=strategy,
                knobs=dict(point),
                error=f"rendering {strategy} failed: {type(error).__name__}: {error}",
            )
        return Proposal(source=source, strategy=strategy, knobs=dict(point))

"""The configurations a budgeted sweep tries: a seeded random few, then those a model of the timings so far
predicts fastest (:class:`Search`)."""

from __future__ import annotations

import itertools
import json
import math
import random

from jitlab.errors import SnippetError
from jitlab.judge.space import ENUMERATE, Space, config_key

#: How many configurations a search of a space above :data:`~jitlab.judge.space.ENUMERATE` draws to choose
#: among (at least).
SAMPLE = 10_000


class Search:
    """The configurations a search tries, round by round, within ``budget`` of them.

    Within the budget (or without one) it is every configuration, in one round. Above it, a seeded
    random few first; then each round, per size, a model of the timings so far (least squares, a little
    ridge, of the log time on a quadratic in each define's log2: tile sizes act by their ratios)
    ranks the untried configurations, and the sizes take turns picking their predicted fastest. On the
    SGEMM tiles' measured H200 timings (tests/fixtures/tune), 60 of 300 found each size's best within
    3 % in 299 of 300 tries (100 seeds × 3 sizes); walks from the fastest to their neighbours missed
    in 28 of 150, a random 60 for 9 seeds in 10. A space of more than :data:`ENUMERATE` configurations is
    never listed: it needs a budget, and the search chooses among :data:`SAMPLE` (or ``budget``) drawn at
    random. The same seed and the same timings give the same
    choices, so a resumed search (its timings in the store) tries again what it tried before, which
    the store already knows.
    """

    #: Random configurations first (at least; or an eighth of the budget).
    START = 8
    #: The ridge term of the fit (the features are of order 1).
    RIDGE = 1.0

    def __init__(self, space: Space, budget: int | None = None, seed: int = 0):
        self.space = space
        self._random = random.Random(seed)
        if space.count() <= ENUMERATE:
            self.every = space.configs()
        elif budget is None:
            raise SnippetError(f"TUNE: {space._size()}, too many to try every one: give budget=N (--budget N), "
                               f"and a search samples the space")
        else:  # never listed whole: the search chooses among a random sample
            self.every = space.sample(max(SAMPLE, budget), self._random)
        self.budget = len(self.every) if budget is None else max(0, min(budget, len(self.every)))
        self.exhaustive = self.budget == len(self.every)
        self._keys = {config_key(c) for c in self.every}
        # Per axis: its values are positive numbers (placed by their log2), else words (by their place).
        self._numeric = {name: all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in values)
                         for name, values in space.defines.items()}
        self.tried: dict[str, dict] = {}

    @property
    def left(self) -> int:
        return self.budget - len(self.tried)

    def next(self, times: dict[object, dict[str, float]], batch: int) -> list[dict]:
        """The next round's configurations (none when the budget is spent).

        Args:
            times: Per size (or per device and size), each timed configuration's key
                (:func:`config_key`) → its time; lower is better.
            batch: How many to choose at most, after the first round.
        """
        if self.left <= 0:
            return []
        untried = [c for c in self.every if config_key(c) not in self.tried]
        if self.exhaustive:
            picks = untried
        elif not self.tried:
            picks = self._random.sample(untried, min(self.left, max(self.START, self.budget // 8)))
        else:
            n = min(self.left, batch)
            picks = self._predicted(times, untried, n)
            rest = [c for c in untried if c not in picks]
            picks += self._random.sample(rest, min(n - len(picks), len(rest)))
        for c in picks:
            self.tried[config_key(c)] = c
        return picks

    def _predicted(self, times: dict[object, dict[str, float]], untried: list[dict], n: int) -> list[dict]:
        """Up to ``n`` untried configurations, each size's predicted fastest in turn."""
        import torch  # lazy: only a budgeted search fits a model

        if not untried:
            return []
        x_all = torch.tensor([self._features(c) for c in untried], dtype=torch.float64)
        rankings = []
        for t in times.values():
            # Only this space's configurations (a store may hold others, from a space since changed).
            timed = [(json.loads(key), ms) for key, ms in t.items() if key in self._keys and ms and ms > 0]
            if len(timed) < 3:
                continue
            x = torch.tensor([self._features(c) for c, _ in timed], dtype=torch.float64)
            y = torch.log(torch.tensor([ms for _, ms in timed], dtype=torch.float64))
            ridge = self.RIDGE * torch.eye(x.shape[1], dtype=torch.float64)
            w = torch.linalg.solve(x.T @ x + ridge, x.T @ (y - y.mean()))
            rankings.append(torch.argsort(x_all @ w, stable=True).tolist())
        picks, seen = [], set()
        for turn in zip(*rankings):
            for i in turn:
                if i not in seen:
                    seen.add(i)
                    picks.append(untried[i])
                    if len(picks) == n:
                        return picks
        return picks

    def _features(self, config: dict) -> list[float]:
        """1, each define's coordinate (log2 of a positive number, else its place on its axis), and
        their products two by two."""
        v = [math.log2(config[name]) if self._numeric[name] else float(values.index(config[name]))
             for name, values in self.space.defines.items()]
        return [1.0, *v, *(a * b for a, b in itertools.combinations_with_replacement(v, 2))]

"""Stragglers: a task that holds the training back without stopping it, named from the same
progress signal as hangs (launcher/contract/liveness.py), pure: a function of samples of each
task's counts, tested against fakes.

Two cases, by how the strategy steps:

* **ParameterServerStrategy**: the workers run closures the coordinator (the chief) hands them,
  each at its own pace; the coordinator's beat counts them by worker (``w=``). A worker whose
  rate over each ``EVERY`` seconds is at least ``SLOWER`` below the median of the other
  workers' is behind: ``worker:3 35 % slower than the median of the other workers``.
* **MultiWorkerMirroredStrategy**: every task steps together (each step's all-reduce waits for
  all), so rates are alike; the one the others wait for spends the least of its time inside
  TensorFlow's calls (its time goes to its own Python between steps: a slow callback, a slow
  input read outside the graph) while its peers wait inside theirs. A task whose share is at least
  ``WAITED`` below the median of the others' holds them back. A task slow *inside* TensorFlow (a
  slower GPU) keeps its peers in the same call: the counts cannot tell it.

A verdict must hold in ``HOLD`` windows in a row (each ``EVERY`` seconds by default, all of them a
minute: ``watchdog.straggler_after``, which sets the windows' length) to be said, and so must its
end: "consistently behind", not one slow stretch (a 25 s pause in a callback spans at most three
of the default windows).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Optional

EVERY = 10.0  # seconds between samples by default (watchdog.straggler_after / HOLD): each rate is taken over one
HOLD = 6  # windows in a row that must agree
SLOWER = 0.25  # ParameterServer: a worker this much below the others' median rate
WAITED = 0.25  # MultiWorkerMirrored: this much less of its time inside TensorFlow than the others'


@dataclass(frozen=True)
class Sample:
    at: float  # the supervisor's clock
    counts: Mapping[str, int]  # task -> its process's counted calls (MWMS: tasks that count)
    inside: Mapping[str, float]  # task -> seconds inside those calls
    closures: Mapping[str, int]  # worker task -> closures the coordinator ran on it (ParameterServer)


@dataclass(frozen=True)
class Lag:
    key: str
    why: str  # the words after the task's name


def behind(old: Sample, new: Sample, strategy: str) -> Optional[Lag]:
    """The task behind the others between two samples, if one is."""
    span = new.at - old.at
    if span <= 0:
        return None
    if strategy == "parameter_server":
        rates = {k: (new.closures[k] - old.closures[k]) / span for k in new.closures
                 if k in old.closures and new.closures[k] >= old.closures[k]}
        if len(rates) < 2:
            return None
        key = min(rates, key=lambda k: (rates[k], k))
        others = statistics.median(v for k, v in rates.items() if k != key)
        if others <= 0 or rates[key] > (1 - SLOWER) * others:
            return None
        slower = round(100 * (1 - rates[key] / others))
        return Lag(key, f"{slower} % slower than the median of the other workers ({rates[key]:.1f} against "
                        f"{others:.1f} calls/s over {span:.0f} s)")
    if strategy != "multi_worker_mirrored":
        return None
    shares = {k: (new.inside[k] - old.inside[k]) / span for k in new.inside
              if k in old.inside and k in new.counts and k in old.counts and new.counts[k] > old.counts[k]}
    if len(shares) < 2:
        return None
    key = min(shares, key=lambda k: (shares[k], k))
    others = statistics.median(v for k, v in shares.items() if k != key)
    if others - shares[key] < WAITED:
        return None
    return Lag(key, f"holds the others back: they spend {min(100, round(100 * others))} % of their time inside "
                    f"TensorFlow's steps, waiting for it, it {round(100 * shares[key])} % (over {span:.0f} s)")


class Stragglers:
    """Samples taken every ``every`` seconds (``after`` / HOLD: a verdict holds for ``after``
    seconds before it is said; 0: none ever is); ``sample`` answers when the named straggler
    changes: a Lag (named), or the key of the one that caught up."""

    def __init__(self, strategy: str, after: float = EVERY * HOLD) -> None:
        self.strategy = strategy
        self.every = after / HOLD
        self.off = after <= 0
        self.last: Optional[Sample] = None
        self.named: Optional[Lag] = None
        self.streak: list[Optional[str]] = []

    def sample(self, now: Sample) -> "Optional[Lag | str]":
        if self.off or self.last is not None and now.at - self.last.at < self.every:
            return None
        last, self.last = self.last, now
        if last is None:
            return None
        lag = behind(last, now, self.strategy)
        self.streak = (self.streak + [lag.key if lag else None])[-HOLD:]
        if len(self.streak) < HOLD or len(set(self.streak)) != 1:
            return None
        if lag is not None and (self.named is None or self.named.key != lag.key):
            self.named = lag
            return lag
        if lag is None and self.named is not None:
            gone, self.named = self.named.key, None
            return gone
        return None

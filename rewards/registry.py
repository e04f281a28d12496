"""Registry of reward terms, resolution of user terms by import path, and weighted composition.

A term is ``fn(t: Transition) -> float``. Built-in terms register by name with ``@register``; a
user's term is named by ``"package.module:function"`` in a config and needs no registration.
Everything is resolved and signature-checked when the composer is built, so a typo fails at env
construction, not at step 10,000.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping

from loopdrive.plugins import Registry
from rewards.transition import Transition

RewardFn = Callable[[Transition], float]


class RewardConfigError(ValueError):
    pass


REWARD_TERMS: Registry = Registry("reward term", RewardConfigError)


def register(name: str | None = None, needs_reference: bool = False):
    """Decorator: register a reward term under ``name`` (default: the function's name).

    ``needs_reference=True`` asks the environment to put the privileged expert's plan into
    ``Transition.reference`` at decision steps (it is only computed when some term needs it).
    """

    def wrap(fn: RewardFn) -> RewardFn:
        _check_signature(fn, name or fn.__name__)
        fn.needs_reference = needs_reference
        return REWARD_TERMS.register(name)(fn)

    return wrap


def _check_signature(fn: object, name: str) -> None:
    if not callable(fn):
        raise RewardConfigError(f"reward term {name!r}: {fn!r} is not callable")
    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        raise RewardConfigError(
            f"reward term {name!r}: must take exactly one argument (a rewards.Transition), "
            f"its signature is {inspect.signature(fn)}"
        ) from None
    except ValueError:  # builtins without signatures: accept
        pass


def resolve(spec: str) -> RewardFn:
    """A registered name, or ``module:function`` imported from the user's code (signature-checked)."""
    fn = REWARD_TERMS.resolve(spec)
    _check_signature(fn, spec)
    return fn


class RewardComposer:
    """Weighted sum of terms; ``__call__`` returns the total and every term's raw value."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        if not isinstance(weights, Mapping):
            raise RewardConfigError(f"rewards must be a mapping of term -> weight, got {type(weights).__name__}")
        self.weights: dict[str, float] = {}
        self.terms: dict[str, RewardFn] = {}
        for name, w in weights.items():
            try:
                w = float(w)
            except (TypeError, ValueError):
                raise RewardConfigError(f"reward weight for {name!r} must be a number, got {w!r}") from None
            if not math.isfinite(w):
                raise RewardConfigError(f"reward weight for {name!r} must be finite, got {w}")
            self.terms[name] = resolve(name)
            self.weights[name] = w
        self.needs_reference = any(getattr(fn, "needs_reference", False) for fn in self.terms.values())

    def __call__(self, t: Transition) -> tuple[float, dict[str, float]]:
        values: dict[str, float] = {}
        total = 0.0
        for name, fn in self.terms.items():
            v = float(fn(t))
            if not math.isfinite(v):
                raise RewardConfigError(f"reward term {name!r} returned {v} at t={t.state.t:.1f}s")
            values[name] = v
            total += self.weights[name] * v
        return total, values

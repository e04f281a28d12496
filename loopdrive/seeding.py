"""One way to derive a seed from the things a random draw depends on.

Every stream of randomness in the suite (an episode's agent noise, a GRPO iteration's task plan and
minibatch order, a CARLA episode's traffic) is seeded by ``derive_seed(*parts)``: the parts are what
the draw must depend on (a run's seed, an iteration, a scenario id) and nothing else, so results do
not depend on worker counts or on the order work is done in. Parts are hashed through numpy's
``SeedSequence``, so nearby parts give unrelated seeds and no arithmetic can make two parts collide.
"""

from __future__ import annotations

import zlib

import numpy as np

Part = int | str


def seed_sequence(*parts: Part) -> np.random.SeedSequence:
    """The ``SeedSequence`` of ``parts`` (for int parts the same as numpy's ``default_rng([a, b, ...])``)."""
    if not parts:
        raise ValueError("a seed needs at least one part")
    return np.random.SeedSequence([_as_entropy(p) for p in parts])


def derive_seed(*parts: Part) -> int:
    """A seed in [0, 2**31 - 1) determined by ``parts`` (ints, or strings such as scenario ids): for
    torch generators and libraries that take an int."""
    return int(seed_sequence(*parts).generate_state(1, np.uint64)[0] % (2**31 - 1))


def rng(*parts: Part) -> np.random.Generator:
    """A numpy generator determined by ``parts``."""
    return np.random.default_rng(seed_sequence(*parts))


def _as_entropy(part: Part) -> int:
    if isinstance(part, bool) or not isinstance(part, int | str | np.integer):
        raise TypeError(f"seed parts are ints or strings, got {part!r}")
    if isinstance(part, str):
        return zlib.crc32(part.encode()) | (1 << 32)  # strings never equal a small int part
    value = int(part)
    if value < 0:
        raise ValueError(f"seed parts must be >= 0, got {value}")
    return value

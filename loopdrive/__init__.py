"""The project's namespace: a foundation every layer may import (``plugins``, ``seeding``: no imports
of the project's own packages) and the entry points (``cli``, ``demo``: the composition root, which
imports every layer lazily)."""

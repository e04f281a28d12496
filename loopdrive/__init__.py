"""LoopDrive command line and demo (the composition root: it may import every layer)."""

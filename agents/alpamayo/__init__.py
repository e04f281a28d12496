"""Alpamayo-R1 in NVIDIA's released layout: load, check against the release's goldens, evaluate, train.

- :class:`AlpamayoR1` (:mod:`.model`): the model, built from transformers' Qwen3-VL classes, strict loading
  and saving in the release's layout.
- :func:`check_reference` (:mod:`.reference`): the largest error per golden of a reference folder.
- :class:`AlpamayoAgent` (:mod:`.agent`): the ``alpamayo:PATH`` agent spec.
"""

from agents.alpamayo.model import AlpamayoR1
from agents.alpamayo.reference import TOLERANCES, check_reference

__all__ = ["TOLERANCES", "AlpamayoR1", "check_reference"]

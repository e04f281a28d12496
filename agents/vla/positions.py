"""Qwen-VL's multimodal rotary position ids, computed once per prompt layout.

transformers builds them row by row in Python on every forward pass (``get_rope_index``): about 2 ms
a row, a third of a batched decision on a GPU (``docs/performance.md``). A row's ids depend only on
which of its tokens are image tokens, which are padding, and the grids of its images, and these are
the same at every decision of a rig. So each row layout is computed once, by transformers' own
function, and reused; rows that share a layout in one batch are computed once too.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn


class RopePositions:
    """``(position_ids [3, B, L])`` of a batch for a Qwen2.5-VL / Qwen3-VL ``model`` (the part that owns
    ``get_rope_index``), memoised per row layout; ``capacity`` layouts are kept, least recent dropped."""

    def __init__(self, model: nn.Module, capacity: int = 256) -> None:
        self.model = model
        self.capacity = capacity
        self._rows: OrderedDict[bytes, torch.Tensor] = OrderedDict()

    def __call__(
        self,
        input_ids: torch.Tensor,
        mm_token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        image_grid_thw: torch.Tensor,
    ) -> torch.Tensor:
        types = (mm_token_type_ids * attention_mask).cpu()
        mask = attention_mask.cpu()
        starts = types == 1
        starts[:, 1:] &= types[:, :-1] != 1  # the first token of each image
        images = starts.sum(1).tolist()  # a row's images, in image_grid_thw's order
        grids = image_grid_thw.cpu()
        rows, end = [], 0
        for i, n in enumerate(images):
            start, end = end, end + n  # this row's images in image_grid_thw
            key = b"|".join((types[i].numpy().tobytes(), mask[i].numpy().tobytes(), grids[start:end].numpy().tobytes()))
            ids = self._rows.get(key)
            if ids is None:
                ids, _ = self.model.get_rope_index(
                    input_ids[i : i + 1],
                    mm_token_type_ids=mm_token_type_ids[i : i + 1],
                    image_grid_thw=image_grid_thw[start:end],
                    attention_mask=attention_mask[i : i + 1],
                )
                self._rows[key] = ids
                if len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
            else:
                self._rows.move_to_end(key)
            rows.append(ids)
        return torch.cat(rows, 1).to(input_ids.device)

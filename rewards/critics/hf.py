"""A critic backed by a local transformers causal LM (any local path; nothing is downloaded).

The model answers the rubric prompt; the answer is parsed robustly (``behaviour: 7/10`` and
variants). When the answer cannot be parsed the rules critic's score is used and the detail
``"parsed": False`` says so, so one odd generation never breaks a training run.
"""

from __future__ import annotations

from pathlib import Path

from rewards.critics.base import ConsistencyScore, rubric_prompt, scores_from_answers
from rewards.critics.rules import RulesCritic


class HFCritic:
    name = "hf"

    def __init__(self, path: str | Path, device: str = "cpu", max_new_tokens: int = 24) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"critic model path {path} does not exist (give a local transformers folder)")
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).eval()
        self.device, self.max_new_tokens, self.torch = device, max_new_tokens, torch
        self.fallback = RulesCritic()

    def _generate(self, prompts: list[str]) -> list[str]:
        tok = self.tokenizer
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        tok.padding_side = "left"
        if getattr(tok, "chat_template", None):
            prompts = [
                tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                for p in prompts
            ]
        enc = tok(prompts, return_tensors="pt", padding=True).to(self.device)
        with self.torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id
            )
        return tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    def complete(self, prompts: list[str]) -> list[str]:
        """The model's greedy answers to free prompts (a dataset teacher uses this)."""
        return self._generate(prompts)

    def score_batch(self, items: list[tuple[str, set[str], set[str]]]) -> list[ConsistencyScore]:
        answers = self._generate([rubric_prompt(*it) for it in items])
        return scores_from_answers(items, answers, self.fallback)

    def score(self, reasoning: str, meta_actions: set[str], causes: set[str]) -> ConsistencyScore:
        return self.score_batch([(reasoning, meta_actions, causes)])[0]

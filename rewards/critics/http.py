"""A critic served by any OpenAI-compatible chat endpoint (a vLLM server, a hosted model, ...).

``POST {base_url}/v1/chat/completions`` with ``Authorization: Bearer <token>``; time-outs, retries
with exponential back-off on connection errors, time-outs and 5xx / 429; batches run concurrently;
answers are cached by prompt. Unparseable answers fall back to the rules critic (``parsed: False``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from rewards.critics.base import ConsistencyScore, rubric_prompt, scores_from_answers
from rewards.critics.rules import RulesCritic


class CriticHTTPError(RuntimeError):
    pass


class HTTPCritic:
    name = "http"

    def __init__(
        self,
        base_url: str,
        model: str = "critic",
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        workers: int = 8,
        cache_size: int = 4096,
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.model, self.timeout, self.retries, self.backoff, self.workers = model, timeout, retries, backoff, workers
        self.token = token if token is not None else os.environ.get("LOOPDRIVE_CRITIC_TOKEN")
        self.cache: dict[str, str] = {}
        self.cache_size = cache_size
        self.fallback = RulesCritic()
        self.requests = 0  # HTTP requests actually sent (cache hits send none)

    def _ask(self, prompt: str) -> str:
        key = hashlib.sha256(prompt.encode()).hexdigest()
        if key in self.cache:
            return self.cache[key]
        body = json.dumps(
            {
                "model": self.model,
                "temperature": 0.0,
                "max_tokens": 32,
                "messages": [{"role": "user", "content": prompt}],
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                self.requests += 1
                req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    answer = json.loads(resp.read())["choices"][0]["message"]["content"]
                if len(self.cache) >= self.cache_size:
                    self.cache.pop(next(iter(self.cache)))
                self.cache[key] = answer
                return answer
            except urllib.error.HTTPError as e:
                if e.code not in (429, 500, 502, 503, 504):
                    raise CriticHTTPError(f"critic endpoint {self.url} answered {e.code}: {e.reason}") from None
                last = e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            except (KeyError, IndexError, json.JSONDecodeError) as e:
                raise CriticHTTPError(f"critic endpoint {self.url} sent an unexpected answer: {e!r}") from None
            time.sleep(self.backoff * 2**attempt)
        raise CriticHTTPError(f"critic endpoint {self.url} failed after {self.retries + 1} tries: {last}")

    def complete(self, prompts: list[str]) -> list[str]:
        """The endpoint's answers to free prompts (a dataset teacher uses this)."""
        return [self._ask(p) for p in prompts]

    def score_batch(self, items: list[tuple[str, set[str], set[str]]]) -> list[ConsistencyScore]:
        prompts = [rubric_prompt(*it) for it in items]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(prompts)))) as pool:
            answers = list(pool.map(self._ask, prompts))
        return scores_from_answers(items, answers, self.fallback)

    def score(self, reasoning: str, meta_actions: set[str], causes: set[str]) -> ConsistencyScore:
        return self.score_batch([(reasoning, meta_actions, causes)])[0]

"""Messages of an exact prompt length (tests only)."""

from __future__ import annotations

from collections.abc import Callable


def text_of(count: Callable[[str], int], tokens: int) -> str:
    """A message whose turn ``count``s exactly ``tokens`` prompt tokens (words, then a shorter tail)."""
    for n in range(tokens, -1, -1):
        for tail in ("", " a", ".", " 1", "!", " ok"):
            text = " ".join(["rain"] * n) + tail
            if count(text) == tokens:
                return text
    raise AssertionError(f"no message of exactly {tokens} prompt tokens")

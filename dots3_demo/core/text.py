"""Text as a page shows it (no Gradio): control bytes made visible.

Model output (random weights emit any byte), a prompt from a set file or an imported session can hold C0 control
characters and DEL. Written raw into HTML they are invisible at best, and a NUL ends the text in some viewers;
every HTML the studio writes (the session report, eval's report, the chat's bubbles) shows each as its Unicode
Control Picture instead (NUL → ␀, BEL → ␇, ESC → ␛, DEL → ␡). Tab, line feed and carriage return stay: they are
layout.
"""

from __future__ import annotations

KEPT = "\t\n\r"
# U+0000–U+001F → U+2400–U+241F (the Control Pictures block, in the same order); DEL (U+007F) → U+2421
_PICTURES = {code: 0x2400 + code for code in range(0x20) if chr(code) not in KEPT} | {0x7F: 0x2421}


def show_controls(text: str) -> str:
    """``text`` with every C0 control character but tab, line feed and carriage return, and DEL, replaced by its
    visible Control Picture (``"a\\x00b"`` → ``"a␀b"``)."""
    return text.translate(_PICTURES)


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a character :func:`show_controls` would replace."""
    return any(ord(c) in _PICTURES for c in text)

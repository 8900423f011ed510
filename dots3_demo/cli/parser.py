"""What every command's flags share: vLLM's parser class (:func:`new_parser`) and argparse ``type=``
functions.

A ``type=`` function turns a flag's text into its value; an ``argparse.ArgumentTypeError`` it
raises becomes the usage error (``app.py: error: argument --flag: <message>``, exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

T = TypeVar("T")


def new_parser(**kwargs: Any) -> FlexibleArgumentParser:
    """vLLM's ``FlexibleArgumentParser`` (accepts ``--flag=value``, ``--json-arg.key`` etc.).

    vLLM keeps the keyword of ``--help=KEYWORD`` on the class, for every later parser of the process;
    a new parser starts without one, so ``--help`` after ``--help=kv-cache`` prints the whole help.
    """
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    FlexibleArgumentParser._search_keyword = None
    return FlexibleArgumentParser(**kwargs)


def flag_type(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    """``parse`` as an argparse ``type=``: its ``ValueError`` message becomes the usage error."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text}")
    return value

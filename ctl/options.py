"""gemsharectl's option values, checked here with the scheduler's own checks (settings.py), so a
bad value is refused before anything is sent, in the words the scheduler would use; gemsharectl's
own numbers (a timeout, an interval, a pid) are refused in the same style.

Each function makes a Typer callback: None passes through (the option was not given). The
completions offer the words an option takes besides numbers.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import typer

from gemshare_nvs.config.settings import PositiveNumber, Size, WholeNumber, check_mode

NO_LIMIT = "none"  # what lifts a limit a config rule gives


def no_limit_completion(incomplete: str) -> list[str]:
    return [NO_LIMIT] if NO_LIMIT.startswith(incomplete.lower()) else []


def _refused(exc: ValueError, example: str):
    return typer.BadParameter(f"{exc} (for example {example})")


def whole(number: WholeNumber, example: str) -> Callable[[Optional[str]], Optional[int]]:
    def parse(text: Optional[str]) -> Optional[int]:
        if text is None:
            return None
        try:
            return number.from_text(text)
        except ValueError as exc:
            raise _refused(exc, example) from None
    return parse


def seconds(name: str, low: float, high: float,
            example: str) -> Callable[[Optional[str]], Optional[float]]:
    """A number of seconds from `low` to `high`, whole or not."""
    def parse(text: Optional[str]) -> Optional[float]:
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # NaN and infinities fail here too
            raise _refused(ValueError(f"{name} must be a number of seconds from {low:g} to "
                                      f"{high:g}, not {text!r}"), example) from None
        return value
    return parse


def positive(number: PositiveNumber, example: str,
             liftable: bool = False) -> Callable[[Optional[str]], object]:
    """A number above 0; with `liftable`, also "none"."""
    def parse(text: Optional[str]):
        if text is None:
            return None
        if liftable and text.strip().lower() == NO_LIMIT:
            return NO_LIMIT
        try:
            return number.check(float(text))
        except ValueError:  # quoting what was typed, not the float it became
            raise _refused(number.refusal(text), example) from None
    return parse


def size(number: Size, example: str) -> Callable[[Optional[str]], object]:
    """A size such as 16GiB, or "none"."""
    def parse(text: Optional[str]):
        if text is None:
            return None
        if text.strip().lower() == NO_LIMIT:
            return NO_LIMIT
        try:
            return number.check(text)
        except ValueError as exc:
            raise _refused(exc, example) from None
    return parse


def mode(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    try:
        return check_mode(text.strip().lower()).label
    except ValueError as exc:
        raise _refused(exc, "--anti-thrash off") from None

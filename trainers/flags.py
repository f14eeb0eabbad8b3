"""Argument types for the programs' flags: a bad value is refused by argparse (exit status
2, with the flag named) before any work. Plain Python: `trainers.translate` runs without
TensorFlow."""

from __future__ import annotations

import argparse


def at_least(minimum, kind=int):
    """An argparse `type` that reads `kind` (int or float) and refuses values below
    `minimum`."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not value >= minimum:  # NaN included
            raise argparse.ArgumentTypeError(f"{text} must be >= {minimum}")
        return value

    parse.__name__ = kind.__name__  # argparse's messages name the type
    return parse


positive_int = at_least(1)
non_negative_float = at_least(0.0, float)

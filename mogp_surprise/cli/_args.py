"""Reading the command line's options: ``--params``, a ratings file's scale, list options given more than once."""
from __future__ import annotations

import argparse
import json


def hyper_params(args: argparse.Namespace) -> dict:
    """``--params`` as a dict of hyper-parameters; errors name the option."""
    try:
        params = json.loads(args.params) if args.params else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"--params is not valid JSON ({exc}): {args.params!r}") from None
    if not isinstance(params, dict):
        raise ValueError(f"--params must be a JSON object of hyper-parameters, e.g. '{{\"n_epochs\": 10}}'; "
                         f"got {args.params!r}")
    return params


def file_scale(df, path: str) -> tuple[float, float]:
    """A ratings file's scale when --rating-scale is not given: its smallest and largest rating."""
    if df.empty:
        raise ValueError(f"{path} holds no ratings")
    low, high = float(df.rating.min()), float(df.rating.max())
    if low == high:
        raise ValueError(f"every rating in {path} is {low:g}, so the file does not show the rating scale; give it "
                         "with --rating-scale LOW HIGH")
    return low, high


class Extend(argparse.Action):
    """A list option given more than once adds up (``--rate 50=5 --rate 100=4``), instead of keeping the last;
    the first use replaces the default (argparse's "extend" would add to it)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, self.dest)
        setattr(namespace, self.dest, ([] if given is self.default else list(given)) + list(values))

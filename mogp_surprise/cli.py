"""Command line: ``mogp-surprise demo`` (and more subcommands). The only module that prints."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence


def _demo(args: argparse.Namespace) -> int:
    from .experiments import load_or_synthesize, run_demo

    data = load_or_synthesize("ml-100k", data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        print("NOTE: MovieLens 100K was not found (set MOGP_DATA or --data-dir, or go online so Surprise can "
              "download it); running on seeded SYNTHETIC data instead.\n")
    params = json.loads(args.params) if args.params else {}
    if args.quick:
        params.setdefault("n_epochs", 3)
    print(f"Data: {data.source}")
    print("Fitting Surprise SVD and MW-GP on the same 80/20 split ...\n")
    result = run_demo(data, mwgp_params=params, random_state=args.seed)
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print("\n(rmse_q90 / rmse_q80: RMSE over the 90 % / 80 % of test ratings MW-GP is most sure about)\n")
    print("A few test ratings with MW-GP's predictive standard deviation:")
    print(result.examples.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    c = result.cold_start
    print(f"\nCold start: a user never seen in training, item {c['item']}: mean {c['mean']:.2f}, "
          f"std {c['std']:.2f} (average std over known test pairs: {c['mean_std_known']:.2f})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mogp-surprise", description="Uncertainty-aware recommenders (MW-GP).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="MW-GP next to Surprise SVD on MovieLens 100K")
    demo.add_argument("--data-dir", default=None,
                      help="folder holding ml-100k/ (default: $MOGP_DATA, then Surprise's cache/downloader)")
    demo.add_argument("--no-download", action="store_true", help="never try Surprise's downloader")
    demo.add_argument("--quick", action="store_true", help="a 3-epoch fit (smoke test)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--params", default=None, help='MW-GP hyper-parameters as JSON, e.g. \'{"n_inducing": 64}\'')
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

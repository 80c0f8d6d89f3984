#!/usr/bin/env python3
"""The property-based tests of the loaders of outside bytes (tests/unit/test_hostile_properties.py:
the spec loader, the discovery-output parser, the run record's reader), run longer than the suite
runs them: ``--examples`` of each (the suite: 40, the same ones every time), with a random seed,
so each run tries inputs no earlier run tried. A failure prints Hypothesis' smallest failing input.

    python bench/fuzz_inputs.py [--examples 5000] [-k spec]

``-k`` picks tests by name, as pytest's does (e.g. ``-k "bytes or yaml"``). Prints the wall time
and the load average before and after (a busy machine slows it, the outcome is the same).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchlib import ROOT, load_average


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=5000, help="examples per property (default 5000)")
    ap.add_argument("-k", default="", help="only the properties whose name matches (pytest -k)")
    args = ap.parse_args()
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=0",
            "tests/unit/test_hostile_properties.py"] + (["-k", args.k] if args.k else [])
    env = {**os.environ, "TFCLUSTER_FUZZ_EXAMPLES": str(args.examples), "PYTHONPATH": str(ROOT)}
    before = load_average()
    started = time.monotonic()
    code = subprocess.call(argv, cwd=ROOT, env=env)
    print(f"fuzz_inputs: {args.examples} examples per property, exit {code}, {time.monotonic() - started:.0f} s, "
          f"load average {before} -> {load_average()}")
    return code


if __name__ == "__main__":
    sys.exit(main())

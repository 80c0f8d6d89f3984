#!/usr/bin/env python3
"""What optional packages on the path cost every TensorFlow process: the imports of a task, in a
fresh interpreter each, with and without the packages of ``--extra`` on its path, alternated.

``import tensorflow`` imports what happens to be installed: Keras 3's scikit-learn wrappers
import scikit-learn (and it scipy), TensorFlow's own legacy Keras imports scipy, tf_keras imports
pandas (and it pyarrow). A task pays for each in its start and its memory, on every host, in
every cold start and in each host's fork server. Two imports are timed:

* ``legacy``: the reference worker's (``TF_USE_LEGACY_KERAS=1``, as tfcluster's plan sets it:
  ``import tensorflow, tensorflow_datasets, tf_keras``);
* ``keras3``: a script's plain ``import tensorflow`` under Keras 3 (``TF_USE_LEGACY_KERAS=0``).

Per import: wall and CPU seconds, VmRSS after it, and which of the packages got imported.

    pip install --no-deps --target /tmp/skl scikit-learn scipy joblib threadpoolctl
    python bench/import_cost.py --extra /tmp/skl [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchlib import load_average

IMPORTS = {"legacy": ("1", "import tensorflow, tensorflow_datasets, tf_keras"),
           "keras3": ("0", "import tensorflow")}
WATCH = ("sklearn", "scipy", "pandas", "pyarrow", "matplotlib")
PROBE = """
import json, resource, sys, time
t = time.perf_counter()
{code}
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
rss = [int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith('VmRSS')][0]
print(json.dumps({{"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": rss,
                  "imported": [m for m in {watch!r} if m in sys.modules]}}))
"""


def one(mode: str, extra: str) -> dict:
    legacy, code = IMPORTS[mode]
    env = {**os.environ, "TF_USE_LEGACY_KERAS": legacy, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": extra}
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code, watch=WATCH)], env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{mode} import failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra", required=True, help="a directory of packages (pip install --target) the 'with' arm has on its path")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    print(f"{sys.executable}, --extra {args.extra}, load average {load_average()}", flush=True)
    rows: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.trials):
        for arm, extra in (("with", args.extra), ("without", "")) if i % 2 == 0 else (("without", ""), ("with", args.extra)):
            for mode in IMPORTS:
                r = one(mode, extra)
                rows.setdefault((mode, arm), []).append(r)
                print(f"trial {i + 1} {mode:6s} {arm:7s}: {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU, "
                      f"{r['rss']:.0f} MiB, imported {','.join(r['imported']) or '-'}", flush=True)
    for mode in IMPORTS:
        def med(arm: str, key: str) -> float:
            return statistics.median(r[key] for r in rows[(mode, arm)])
        print(f"{mode}: with {med('with', 'wall'):.2f} s ({med('with', 'cpu'):.2f} CPU), {med('with', 'rss'):.0f} MiB; "
              f"without {med('without', 'wall'):.2f} s ({med('without', 'cpu'):.2f} CPU), {med('without', 'rss'):.0f} MiB; "
              f"the extra packages cost {med('with', 'wall') - med('without', 'wall'):.2f} s, "
              f"{med('with', 'rss') - med('without', 'rss'):.0f} MiB a process")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

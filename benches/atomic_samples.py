#!/usr/bin/env python3
"""How much of a `perf record` profile of the proxy falls on atomic instructions.

Sampling on these machines has no hardware counters (the `cpu-clock` event), and a sample
lands on the instruction after the one that stalled: the samples on the instruction right
after a locked one (`lock`-prefixed, or `xchg` with memory) are the latency of that atomic
operation. This tool reads `perf annotate --stdio -l` of a profile and prints their share of
the user-space samples, grouped by the source lines perf names just before each atomic.

Usage (the proxy under load, e.g. `SECTIONS=shapes benches/load.sh` or `wrk` on one shape):

    perf record -F 2000 -p "$(pgrep -f 'releasegate serve')" -o four.data -- sleep 6
    python3 benches/atomic_samples.py four.data [--top 25]

Standard library only; needs `perf` on the PATH.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys

HEADER = re.compile(r"Disassembly of \S+ for \S+ \((\d+) samples")
INSTRUCTION = re.compile(r"\s+([0-9.]+)\s+:\s+[0-9a-f]+:\s+(.*)")
SOURCE = re.compile(r"\s+:\s+\d+\s+(\S.*)$")


def is_atomic(instruction: str) -> bool:
    return instruction.startswith("lock") or (
        instruction.startswith("xchg ") and "(%" in instruction
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="a perf.data file")
    parser.add_argument("--top", type=int, default=25, help="sites to print")
    args = parser.parse_args()
    try:
        text = subprocess.run(
            ["perf", "annotate", "--stdio", "-l", "-i", args.data],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"atomic_samples: perf annotate failed: {error}", file=sys.stderr)
        return 1
    total = 0.0
    sites: collections.Counter[str] = collections.Counter()
    samples = 0
    context: list[str] = []
    pending: str | None = None
    for line in text.splitlines():
        header = HEADER.search(line)
        if header:
            samples = int(header.group(1))
            total += samples
            context, pending = [], None
            continue
        source = SOURCE.match(line)
        if source:
            name = source.group(1)[:90]
            if not name.startswith(("core::", "<core::")):
                context = (context + [name])[-2:]
            continue
        instruction = INSTRUCTION.match(line)
        if not instruction:
            continue
        share = float(instruction.group(1)) * samples / 100
        if pending is not None:
            sites[pending] += share
        op = instruction.group(2).strip()
        pending = " | ".join(context) if is_atomic(op) else None
    after = sum(sites.values())
    if total == 0:
        print("atomic_samples: no annotated samples", file=sys.stderr)
        return 1
    print(
        f"{after:.0f} of {total:.0f} annotated samples ({100 * after / total:.1f} %) "
        "fall on the instruction after an atomic one"
    )
    for site, count in sites.most_common(args.top):
        print(f"{count:7.0f}  {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two callgrind dumps side by side: each function's self cost per request, this build's
beside a baseline's, largest differences first (what docs/benchmarks.md's per-function split of
a fast GET came from). Dumps: `instructions.py --only PART --keep` says where they are.

    python3 loadtest/bench/callgrind_diff.py THIS_DUMP BASELINE_DUMP --requests 20000 [--top 25]

Functions are matched by name (hashes dropped), so a function renamed or inlined differently in
one build shows as gone on one side and new on the other: only the totals compare exactly.
"""
import argparse
import re
import subprocess


def self_costs(dump):
    """Self instructions per function name in `dump` (callgrind_annotate --inclusive=no)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", dump],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    costs, total = {}, 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if not m:
            continue
        if "PROGRAM TOTALS" in line:
            total = int(m.group(1).replace(",", ""))
            continue
        # The frames below the program's own (main, the runtime's start) carry the whole total.
        if int(m.group(1).replace(",", "")) == total:
            continue
        name = re.sub(r"\s*\[.*\]$", "", m.group(2).strip())
        name = re.sub(r"^[^:]*:", "", name, count=1) if not name.startswith("???") else name
        name = re.sub(r"::h[0-9a-f]{16}", "", name)
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("this")
    ap.add_argument("baseline")
    ap.add_argument("--requests", type=int, required=True, help="requests the dumps counted")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    (a, total_a), (b, total_b) = self_costs(args.this), self_costs(args.baseline)
    n = args.requests
    print(f"total per request: {total_a / n:,.0f} this, {total_b / n:,.0f} baseline")
    rows = sorted(((a.get(k, 0) - b.get(k, 0)) / n, k) for k in set(a) | set(b))
    print(f"{'diff':>8} {'this':>8} {'base':>8}  function")
    for i, (d, k) in enumerate(rows[::-1][:args.top] + rows[:args.top]):
        if i == args.top:
            print("...")
        print(f"{d:+8.1f} {a.get(k, 0) / n:8.1f} {b.get(k, 0) / n:8.1f}  {k[:140]}")


if __name__ == "__main__":
    main()

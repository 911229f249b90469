"""Charts of a throughput.py run: throughput and p99 latency by pipeline depth, one panel per
transport and value size, one line per target (GET solid, SET dashed).

    python3 loadtest/bench/charts.py --json throughput.json [--out-dir docs/img] [--write-docs]

Needs matplotlib; loadtest/compare runs this with a venv of its own (~/.cache/shoal/venv-bench),
never the system's Python packages. Writes throughput.png and p99.png into --out-dir and, with
--write-docs, the `charts` section of the report linking them.
"""
import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

import common

try:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import matplotlib.ticker
except ImportError:
    sys.exit("[bench] charts.py needs matplotlib: run it with loadtest/compare (which installs it into "
             "~/.cache/shoal/venv-bench), or `python3 -m venv V && V/bin/pip install matplotlib`")

COLORS = ["#d62728", "#7f7f7f", "#1f77b4", "#17becf", "#2ca02c", "#9467bd"]


def human(v, _pos=None):
    """Axis labels like 800k and 1.2M instead of 800000 and 1.2e6."""
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    return f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"


def chart(data, field, ylabel, title, path, log_y):
    results = data["results"]
    transports = sorted({r["transport"] for r in results}, key=["tcp", "unix"].index)
    sizes = sorted({r["size"] for r in results})
    pipelines = sorted({r["pipeline"] for r in results})
    fig, axes = plt.subplots(len(transports), len(sizes), figsize=(5.5 * len(sizes), 3.8 * len(transports)),
                             squeeze=False, sharex=True)
    for i, tr in enumerate(transports):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            for k, target in enumerate(data["targets"]):
                for test, style in (("GET", "-"), ("SET", "--")):
                    pts = sorted((r["pipeline"], r[field]) for r in results
                                 if (r["target"], r["transport"], r["size"], r["test"]) == (target, tr, size, test))
                    if pts:
                        ax.plot([p for p, _ in pts], [v for _, v in pts], style, marker="o", markersize=3,
                                color=COLORS[k % len(COLORS)], label=f"{target} {test}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(pipelines, [str(p) for p in pipelines])
            if log_y:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            else:
                ax.set_ylim(bottom=0)
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(human))
            ax.set_title(f"{'TCP' if tr == 'tcp' else 'Unix socket'}, {size:,}-byte values", fontsize=10)
            ax.set_xlabel("pipeline depth (redis-benchmark -P)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=12, y=0.995)
    caption = textwrap.fill(f"{data['machine']}. {data['command']}", 150)
    fig.text(0.5, 0.955, caption, ha="center", va="top", fontsize=7)
    fig.tight_layout(rect=(0, 0.09, 1, 0.92))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    common.say(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="raw results from throughput.py --json")
    ap.add_argument("--out-dir", default=str(common.DOCS.parent / "img"))
    ap.add_argument("--write-docs", action="store_true", help=f"update the charts section of {common.DOCS}")
    args = ap.parse_args()
    data = json.loads(Path(args.json).read_text())
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chart(data, "rps", "requests/s", "Throughput by pipeline depth (higher is better)", out / "throughput.png", False)
    chart(data, "p99", "p99 latency, ms (log)", "p99 latency by pipeline depth (lower is better)", out / "p99.png", True)
    if args.write_docs:
        rel = os.path.relpath(out, common.DOCS.parent)
        body = (f"From the redis-benchmark run in the throughput section ({data['machine']}).\n\n"
                f"![Throughput by pipeline depth]({rel}/throughput.png)\n\n"
                f"![p99 latency by pipeline depth]({rel}/p99.png)\n")
        common.write_docs("charts", body)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Draw `mnemo eval ... --json` results as a PNG (matplotlib, from Debian's python3-matplotlib).

    scripts/plot_eval.py RESULTS.jsonl [MORE.jsonl ...] -o PLOT.png [--title T]   (Debian python3 + matplotlib)

Each file is one run (its name, less the extension, labels its curves: give FoT and the baseline in two files to
see them side by side). The task is read from the lines' "eval" key; all files must hold the same task.
  forgetting-curve  copy and LM accuracy against length, a band of one standard deviation, the memory lengths
  dict-lookup       value accuracy against dictionary length (log axis), min-max bars over the documents
  passkey           accuracy against prompt length (log axis)
  perplexity        one bar per run
"""
import argparse
import json
import os
import sys


def read_runs(paths):
    runs = []
    for p in paths:
        rows = []
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot_eval: {p}:{n}: not JSON ({e})")
                if "eval" in row:
                    rows.append(row)
        if not rows:
            sys.exit(f"plot_eval: {p}: no 'mnemo eval --json' lines in it")
        runs.append((os.path.splitext(os.path.basename(p))[0], rows))
    tasks = {r["eval"] for _, rows in runs for r in rows}
    if len(tasks) != 1:
        sys.exit(f"plot_eval: the files mix tasks ({', '.join(sorted(tasks))}); plot one task at a time")
    return tasks.pop(), runs


def plot_forgetting(ax, runs):
    for label, rows in runs:
        pts = sorted((r for r in rows if "length" in r), key=lambda r: r["length"])
        x = [r["length"] for r in pts]
        for key, style, name in (("copy", "-o", "copy"), ("lm", "--s", "LM")):
            y = [100 * r[key] for r in pts]
            sd = [100 * r[key + "_std"] for r in pts]
            line, = ax.plot(x, y, style, label=f"{label}: {name}" if len(runs) > 1 else name)
            ax.fill_between(x, [a - b for a, b in zip(y, sd)], [a + b for a, b in zip(y, sd)],
                            color=line.get_color(), alpha=0.15)
        for r in rows:
            if "fine_length" in r and r["fine_length"]:
                ax.axvline(r["fine_length"], color="green", linestyle=":", label="fine memory length")
            if "coarse_length" in r and r["coarse_length"]:
                ax.axvline(r["coarse_length"], color="grey", linestyle=":", label="coarse memory length")
    ax.set_xlabel("test length (tokens)")
    ax.set_ylabel("teacher-forced accuracy (%)")
    ax.set_ylim(-2, 102)


def plot_by_length(ax, runs, lo_key=None, hi_key=None):
    for label, rows in runs:
        pts = sorted((r for r in rows if "length" in r and "accuracy" in r), key=lambda r: r["length"])
        x = [r["length"] for r in pts]
        y = [100 * r["accuracy"] for r in pts]
        if lo_key and all(lo_key in r for r in pts):
            err = [[a - 100 * r[lo_key] for a, r in zip(y, pts)], [100 * r[hi_key] - a for a, r in zip(y, pts)]]
            ax.errorbar(x, y, yerr=err, fmt="-o", capsize=3, label=label)
        else:
            ax.plot(x, y, "-o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-2, 102)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title")
    a = ap.parse_args()
    task, runs = read_runs(a.files)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    if task == "forgetting-curve":
        plot_forgetting(ax, runs)
    elif task == "dict-lookup":
        plot_by_length(ax, runs, "accuracy_min", "accuracy_max")
        ax.set_xlabel("document length (tokens: the dictionary, then the queries)")
    elif task == "passkey":
        plot_by_length(ax, runs)
        ax.set_xlabel("prompt length (tokens)")
    elif task == "perplexity":
        labels = [f"{l}\n({'memory' if r[0].get('memory') else 'window %d' % r[0].get('window', 0)})"
                  for l, r in runs]
        ax.bar(labels, [r[-1]["perplexity"] for _, r in runs])
        ax.set_ylabel("perplexity")
    else:
        sys.exit(f"plot_eval: unknown task '{task}'")
    ax.set_title(a.title or f"mnemo eval {task}")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        seen = {}
        for h, l in zip(handles, labels):
            seen.setdefault(l, h)
        ax.legend(seen.values(), seen.keys(), fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output)
    print(f"plot_eval: wrote {a.output}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Count the repeated blocks of C code: pairs of places that share six or more identical lines (stdlib only).

    scripts/count_duplicates.py [--rev REV] [--lines N] [--includes] [--list] [DIR ...]

Reads the C, C++ and CUDA sources git knows (tracked, plus untracked ones not ignored) under the given top-level
directories (default: all), or with --rev those of that commit. Each line is normalised (whitespace collapsed,
blank lines and, unless --includes, #include lines dropped: a shared list of headers is not a copy); every window of N lines (default 6) is hashed. Two places whose windows match, window after
window, are one block: a pair of places counts once however long the block runs, and N-line windows made of a
single repeated line never count (a table of `0,` rows is not a copy). --list prints each block's two places.
"""
import argparse
import collections
import hashlib
import re
import subprocess
import sys

SUFFIXES = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def sources(rev, dirs):
    if rev:
        names = git("ls-tree", "-r", "--name-only", rev).split("\n")
    else:
        names = git("ls-files", "-co", "--exclude-standard").split("\n")
    names = [n for n in names if n.endswith(SUFFIXES) and (not dirs or n.split("/")[0] in dirs)]
    for name in sorted(names):
        try:
            text = git("show", f"{rev}:{name}") if rev else open(name, encoding="utf-8", errors="replace").read()
        except (OSError, subprocess.CalledProcessError):
            continue  # deleted in the working tree
        yield name, text


def normalised(text, includes):
    """(line number, normalised text) of each line that counts."""
    out = []
    for i, line in enumerate(text.split("\n"), 1):
        line = re.sub(r"\s+", " ", line).strip()
        if line and (includes or not line.startswith("#include")):
            out.append((i, line))
    return out


def blocks(files, n, includes):
    """Each maximal pair of places sharing n or more lines: ((file, line), (file, line)), sorted."""
    where = collections.defaultdict(list)  # window hash -> [(file index, window index)]
    lines = []
    for fi, (name, text) in enumerate(files):
        ls = normalised(text, includes)
        lines.append(ls)
        for w in range(len(ls) - n + 1):
            window = [t for _, t in ls[w:w + n]]
            if len(set(window)) == 1:
                continue
            where[hashlib.sha1("\n".join(window).encode()).digest()].append((fi, w))
    matches = set()
    for places in where.values():
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (fa, wa), (fb, wb) = places[a], places[b]
                if fa == fb and abs(wa - wb) < n:
                    continue  # a window overlapping itself
                matches.add((fa, wa, fb, wb))
    found = []
    for fa, wa, fb, wb in matches:
        if (fa, wa - 1, fb, wb - 1) in matches:
            continue  # the same block as the window before
        found.append(((files[fa][0], lines[fa][wa][0]), (files[fb][0], lines[fb][wb][0])))
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", help="top-level directories (default: all)")
    ap.add_argument("--rev", help="count the sources of this commit instead of the working tree")
    ap.add_argument("--lines", type=int, default=6, help="shortest block (default 6)")
    ap.add_argument("--includes", action="store_true", help="count #include lines too")
    ap.add_argument("--list", action="store_true", help="print each block's two places")
    args = ap.parse_args()
    files = list(sources(args.rev, set(args.dirs)))
    found = blocks(files, args.lines, args.includes)
    if args.list:
        for (fa, la), (fb, lb) in found:
            print(f"{fa}:{la}  {fb}:{lb}")
    per_dir = collections.Counter(fa.split("/")[0] for (fa, _), _ in found)
    print(f"{len(found)} pairs of places sharing {args.lines}+ lines in {len(files)} files"
          f" ({', '.join(f'{d} {c}' for d, c in sorted(per_dir.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

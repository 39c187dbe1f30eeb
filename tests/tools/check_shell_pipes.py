#!/usr/bin/env python3
"""Fails on a pipe into a reader that may stop before its writer is done, in a script under pipefail.

Under `set -o pipefail` a pipeline fails when any of its commands does. A reader that stops early
(`head`, `grep -q`/`-m`/`-l`, an awk program that `exit`s, a sed script that `q`uits) closes the
pipe while the writer may still be writing: the writer's next write gets SIGPIPE and the pipeline
ends with 141. Whether that happens depends on how the writer splits its output and on timing, so
the script passes or dies by chance: `make demo` died of it on a newcomer's first try (issue 49),
and `if cmd | grep -q X` silently takes the `else` branch. The fix is to let the reader read a
string or a file instead (`grep -q X <<<"$text"`, `awk ... <<<"$text"`, `grep -m1 X FILE`), or to
read everything (`grep -c`, `sed -n 1p`).

Usage: check_shell_pipes.py SOURCE_DIR   (every tracked *.sh file and .ci/run; exit 1 on a finding)
       check_shell_pipes.py FILE...      (those files)
A line may keep such a pipe when its writer cannot be cut short, saying why:
`... | head -n 1  # pipe-ok: the writer is printf of one line`.
"""
import os
import re
import subprocess
import sys

# A reader that may close its input before the end: the command word and a test on its arguments.
EARLY_READERS = {
    "head": lambda args: True,
    "grep": lambda args: any(re.fullmatch(r"-[a-zA-Z]*[qlm][a-zA-Z0-9]*|--quiet|--silent|"
                                          r"--files-with-matches|--max-count(=\S+)?", a)
                             for a in args),
    "awk": lambda args: any(re.search(r"\bexit\b", a) for a in args),
    "sed": lambda args: any(re.search(r"(^|[;{}\s/0-9$])[qQ]\d*\s*($|[;}])", a) for a in args),
}


def words(segment):
    """The words of one pipeline stage, quotes removed (good enough to find options and programs)."""
    out, word, quote, i = [], "", None, 0
    while i < len(segment):
        c = segment[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"' and i + 1 < len(segment):
                i += 1
                word += segment[i]
            else:
                word += c
        elif c in "'\"":
            quote = c
        elif c.isspace():
            if word:
                out.append(word)
            word = ""
        else:
            word += c
        i += 1
    if word:
        out.append(word)
    return out


def split_pipes(line):
    """The stages of the pipelines on a logical line read from a pipe: split on `|` outside quotes
    (not on `||`), and at `;`, `&` and command substitutions, which start pipelines of their own
    (also inside double quotes)."""
    stages, cur, quote, outer, i = [], "", None, [], 0
    while i < len(line):
        c = line[i]
        if (quote == "'" and c != "'") or (quote == '"' and line[i:i + 2] != "$(" and c != '"'):
            if c == "\\" and quote == '"':
                cur += line[i:i + 2]
                i += 2
                continue
            cur += c
        elif c == quote:
            quote = None
            cur += c
        elif line[i:i + 2] == "$(":
            stages.append((cur, False))
            cur = ""
            outer.append(quote)  # The substitution has quotes of its own.
            quote = None
            i += 1
        elif c in "'\"":
            quote = c
            cur += c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            break  # A comment.
        elif c == "|" and line[i:i + 2] == "||":
            stages.append((cur, False))
            cur = ""
            i += 1
        elif c == "|":
            stages.append((cur, True))
            cur = ""
        elif c in ";&":
            stages.append((cur, False))
            cur = ""
        elif c == ")":
            stages.append((cur, False))
            cur = ""
            if outer:
                quote = outer.pop()
        else:
            cur += c
        i += 1
    stages.append((cur, False))
    # A stage is read from a pipe when the stage before it ended with `|`.
    return [seg for k, (seg, _) in enumerate(stages) if k > 0 and stages[k - 1][1]]


def logical_lines(text):
    """(first line number, text) with continued lines (`\\`, a trailing `|`, `&&` or `||`) joined."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start, cur = i + 1, lines[i]
        while i + 1 < len(lines) and re.search(r"(\\|\||&&)\s*$", cur.split(" #")[0]):
            cur = re.sub(r"\\\s*$", " ", cur) + " " + lines[i + 1]
            i += 1
        yield start, cur
        i += 1


def check(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if "pipefail" not in text:
        return []
    findings = []
    for number, line in logical_lines(text):
        if "pipe-ok:" in line:
            continue
        for stage in split_pipes(line):
            w = words(stage.strip())
            while w and re.fullmatch(r"\w+=.*|!|then|do|else|exec|command", w[0]):
                w = w[1:]
            if w and w[0] in EARLY_READERS and EARLY_READERS[w[0]](w[1:]):
                findings.append(f"{path}:{number}: `{stage.strip()}` reads from a pipe and may stop "
                                f"before the writer is done; under pipefail the writer's SIGPIPE "
                                f"fails the pipeline by chance. Give it a string or a file instead "
                                f"(`<<<\"$text\"`, a file argument) or a reader that reads to the end")
    return findings


def main(argv):
    if len(argv) == 2 and os.path.isdir(argv[1]):
        root = argv[1]
        listed = subprocess.run(["git", "-C", root, "ls-files", "*.sh", ".ci/run"], check=True,
                                capture_output=True, text=True).stdout.split()
        paths = [os.path.join(root, p) for p in listed]
    else:
        paths = argv[1:]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    findings = [f for p in paths for f in check(p)]
    for f in findings:
        print(f)
    print(f"check_shell_pipes: {len(paths)} scripts, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

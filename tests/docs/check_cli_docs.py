#!/usr/bin/env python3
"""Every command and flag the docs show in a code block exists in the CLI.

    check_cli_docs.py SOURCE_DIR XMOD [--worker XMOD_WORKER] [--train XMOD_TRAIN]
                      [--file DOC.md ...]

Reads the fenced code blocks of README.md, docs/*.md, sweeps/README.md,
schema/README.md and deploy/README.md (or the files given with --file), finds each
invocation of `xmod SUBCOMMAND ...` (also `build/bin/xmod`, `$XMOD_BIN/xmod`,
`$XMOD`), `xmod-worker ...` and `xmod-train ...`, and checks that the subcommand
exists (nested ones such as `xmod data prepare` too) and that every `--flag` of the
invocation is listed by that command's `--help`. Handles backslash continuations,
`#` comments, `;`/`&&`/`|` between commands, `$(...)`, and synopsis forms such as
`[--flag VALUE]` and `(--a X | --b Y)`. A placeholder in capitals (`xmod COMMAND`)
is not checked. Without --worker/--train, invocations of those binaries are
counted as skipped.

Prints each failure as `FILE:LINE: `xmod sub --flag`: reason` and exits 1 on any.
Standard library only.
"""

import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
# Option names at the start of a help line: "--db", "-h,--help", "-h,     --help".
HELP_NAMES = re.compile(r"^\s*(-[^\s,]*(?:,\s*-[^\s,]*)*)")
SECTION = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")
WORD = re.compile(r"^[a-z][a-z0-9-]*$")
FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_-]*$")
SEPARATORS = {";", "&&", "||", "&", "|", ";;"}
BINARIES = ("xmod", "xmod-worker", "xmod-train")


class Help:
    """A command's --help: its long flags and its subcommands."""

    def __init__(self, flags, subcommands, optional_subcommand=False):
        self.flags = flags
        self.subcommands = subcommands
        # A command that runs on its own too (`xmod plan SWEEP` beside
        # `xmod plan predict`): its usage shows "[SUBCOMMAND]".
        self.optional_subcommand = optional_subcommand


class Cli:
    """Runs `BINARY [SUB...] --help` once per command path and remembers it."""

    def __init__(self, binaries):
        self.binaries = binaries  # name -> path or None
        self.cache = {}

    def help(self, binary, path):
        key = (binary,) + tuple(path)
        if key in self.cache:
            return self.cache[key]
        exe = self.binaries.get(binary)
        result = None
        if exe:
            try:
                run = subprocess.run([exe] + list(path) + ["--help"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, timeout=20,
                                     universal_newlines=True)
                if run.returncode == 0:
                    result = parse_help(run.stdout)
            except (OSError, subprocess.TimeoutExpired):
                result = None
        self.cache[key] = result
        return result


def parse_help(text):
    flags, subcommands = set(), set()
    optional = "[SUBCOMMAND]" in text
    section = ""
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            section = m.group(1).strip().lower()
            continue
        if section.startswith("subcommand"):
            parts = line.split()
            if parts and WORD.match(parts[0]) and line.startswith(" "):
                subcommands.add(parts[0])
            continue
        m = HELP_NAMES.match(line)
        if m and line[:1].isspace():
            flags.update(re.findall(r"--[A-Za-z0-9][A-Za-z0-9_-]*", m.group(1)))
    return Help(flags, subcommands, optional)


def code_lines(path):
    """Yields (line number, text) of every line inside a fenced code block."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if fence is None:
                if m:
                    fence = m.group(1)
                continue
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not m.group(2):
                fence = None
                continue
            yield number, line.rstrip("\n")


def inline_spans(path):
    """Yields (line number, text) of every inline `code span` outside code blocks that
    starts with an xmod binary (prose such as `xmod results SWEEP --format json`)."""
    inside = {n for n, _ in code_lines(path)}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if number in inside or FENCE.match(line):
                continue
            for span in re.findall(r"`([^`]+)`", line):
                words = span.split()
                if words and binary_of(words[0]):
                    yield number, span


def strip_comment(line):
    """Drops a shell comment: a # at the start or after a blank, outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def logical_lines(numbered):
    """Joins backslash continuations; yields (first line number, text)."""
    start, parts = None, []
    for number, line in numbered:
        line = strip_comment(line)
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []
    if parts:
        yield start, " ".join(parts)


def substitute(text):
    """Replaces $(...) (innermost first) and `...` with a placeholder word."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\$\([^()]*\)", "SUBST", text)
    return re.sub(r"`[^`]*`", "SUBST", text)


def tokens(text):
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: plain words are good enough
        return re.findall(r"[;&|()]+|[^\s;&|()]+", text)


def binary_of(token):
    """'xmod', 'xmod-worker' or 'xmod-train' when the token runs one, else None."""
    token = token.strip("'\"")
    if token in ("$XMOD", "${XMOD}"):
        return "xmod"
    base = token.rsplit("/", 1)[-1]
    return base if base in BINARIES else None


def commands(words):
    """Splits a token list into commands at ; && || | (| inside ( ) or [ ] is a synopsis
    alternative and does not split); yields lists of tokens, [ ] stripped, ( ) kept."""
    depth, current = 0, []
    for w in words:
        if w == "(" or w.startswith("["):
            depth += w.count("[") + (1 if w == "(" else 0)
        if w == ")" or w.endswith("]"):
            depth = max(0, depth - (w.count("]") + (1 if w == ")" else 0)))
        if w in SEPARATORS and not (w == "|" and depth > 0):
            if current:
                yield current
            current = []
            continue
        current.append(w if w in ("(", ")") else w.strip("[]"))
    if current:
        yield current


def is_placeholder(word):
    return bool(re.match(r"^(<.*>|[A-Z][A-Z0-9_]*)$", word))


class Checker:
    def __init__(self, cli, root):
        self.cli = cli
        self.root = root
        self.invocations = 0
        self.flags = 0
        self.skipped = 0
        self.failures = []

    def fail(self, where, shown, reason):
        self.failures.append("{}: `{}`: {}".format(where, shown, reason))

    def check_file(self, path, inline=False):
        rel = os.path.relpath(path, self.root)
        lines = logical_lines(code_lines(path))
        if inline:
            lines = inline_spans(path)
        for number, text in lines:
            for cmd in commands(tokens(substitute(text))):
                for i, w in enumerate(cmd):
                    binary = binary_of(w)
                    if binary:
                        self.check(binary, cmd[i + 1:], "{}:{}".format(rel, number))
                        break

    def check(self, binary, args, where):
        # Output lines ("xmod serve: listening ...") and prose are not invocations.
        if binary == "xmod":
            if not args or not (WORD.match(args[0]) or FLAG.match(args[0].split("=")[0])):
                return
        if self.cli.binaries.get(binary) is None:
            self.skipped += 1
            return
        if binary == "xmod" and args and is_placeholder(args[0]):
            self.skipped += 1
            return
        path = []
        info = self.cli.help(binary, path)
        if info is None:
            self.fail(where, binary, "`{} --help` failed".format(binary))
            return
        rest = list(args)
        # Walk down the subcommands: `xmod data prepare ...`.
        while info.subcommands and rest and not rest[0].startswith("-"):
            word = rest[0]
            if is_placeholder(word):
                self.skipped += 1
                return
            if word not in info.subcommands and info.optional_subcommand:
                break  # a positional of the command itself
            if word not in info.subcommands:
                self.invocations += 1
                self.fail(where, " ".join([binary] + path + [word]),
                          "no such command (known: {})".format(", ".join(sorted(info.subcommands))))
                return
            path.append(word)
            rest.pop(0)
            info = self.cli.help(binary, path)
            if info is None:
                self.invocations += 1
                self.fail(where, " ".join([binary] + path), "`--help` failed")
                return
        if info.subcommands and not info.optional_subcommand and binary == "xmod" and \
                not any(f in ("--help", "-h", "--version") for f in rest):
            self.invocations += 1
            self.fail(where, " ".join([binary] + path), "needs a subcommand ({})".format(
                ", ".join(sorted(info.subcommands))))
            return
        self.invocations += 1
        for word in rest:
            if word.startswith(">") or word.startswith("<"):
                break  # a redirection: what follows is a file
            name = word.split("=", 1)[0]
            if not FLAG.match(name):
                continue
            self.flags += 1
            if name not in info.flags:
                self.fail(where, " ".join([binary] + path + [name]),
                          "not an option of `{}` (its options: {})".format(
                              " ".join([binary] + path), ", ".join(sorted(info.flags))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir")
    parser.add_argument("xmod")
    parser.add_argument("--worker", help="the xmod-worker binary")
    parser.add_argument("--train", help="the xmod-train binary")
    parser.add_argument("--file", action="append", help="check these files instead")
    parser.add_argument("--inline", action="store_true",
                        help="also check inline `xmod ...` code spans in the prose")
    a = parser.parse_args()
    root = os.path.abspath(a.source_dir)
    if a.file:
        files = [os.path.abspath(f) for f in a.file]
    else:
        files = [os.path.join(root, "README.md")] + sorted(
            glob.glob(os.path.join(root, "docs", "*.md"))) + [
            os.path.join(root, p, "README.md") for p in ("sweeps", "schema", "deploy")]
    for binary, path in (("xmod", a.xmod), ("xmod-worker", a.worker), ("xmod-train", a.train)):
        if path and not os.access(path, os.X_OK):
            print("check_cli_docs: {} is not an executable file".format(path), file=sys.stderr)
            return 2
    cli = Cli({"xmod": a.xmod, "xmod-worker": a.worker, "xmod-train": a.train})
    checker = Checker(cli, root)
    for f in files:
        if not os.path.isfile(f):
            checker.failures.append("{}: missing".format(os.path.relpath(f, root)))
            continue
        checker.check_file(f)
        if a.inline:
            checker.check_file(f, inline=True)
    for line in checker.failures:
        print(line)
    print("check_cli_docs: {} files, {} invocations, {} flags checked, {} skipped "
          "(placeholder command or binary not given); {} failures".format(
              len(files), checker.invocations, checker.flags, checker.skipped,
              len(checker.failures)))
    if checker.invocations == 0:
        print("check_cli_docs: found no invocation at all; is the source dir right?")
        return 1
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks the container files without a registry or a container engine.

    check-container-files.py [SOURCE_DIR]   # default: the repository holding this file
    check-container-files.py --self-test    # broken copies, each of which must be refused

deploy/container/Dockerfile: every instruction is a Dockerfile keyword; every
variable an instruction uses is declared (FROM: by an ARG before the first FROM;
elsewhere by an ARG or ENV of its stage, so a global ARG used in a stage must be
declared again there); COPY/ADD sources exist in the repository and .dockerignore
does not leave them out; COPY --from names an earlier stage.

deploy/container/xmod.def: every stage has Bootstrap and From headers and only
sections Apptainer knows; every {{ NAME }} is declared in its stage's %arguments
(with the same default wherever it is declared); %files sources exist in the
repository; %files from STAGE names an earlier stage.

Both: every package an `apt-get install` names is in deploy/install-deps.sh's
lists or known to apt-cache (skipped, saying so, without apt-cache or its lists).

Names: each image deploy/k8s/*.yaml runs is one that a documented build command
(`podman|docker build ... -t NAME`) tags, and each .sif deploy/slurm/* names is one
that a documented `apptainer build NAME.sif ...` writes. The documents read are the
container files, deploy/README.md and docs/deploy-gpu.md.

Prints `FILE:LINE: problem` for each problem and exits 1 if there is any.
Standard library only.
"""

import fnmatch
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOCKERFILE = "deploy/container/Dockerfile"
DEFFILE = "deploy/container/xmod.def"
BUILD_LOCAL = "deploy/container/build-local.sh"
INSTALL_DEPS = "deploy/install-deps.sh"
DOCS = ("deploy/README.md", "docs/deploy-gpu.md")

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY",
                "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL",
                "HEALTHCHECK", "SHELL"}
SHELL_FORMS = {"RUN", "CMD", "ENTRYPOINT", "HEALTHCHECK", "SHELL", "ONBUILD"}
# Build arguments every builder defines, and variables a shell has anyway.
PREDEFINED = {"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY",
              "http_proxy", "https_proxy", "ftp_proxy", "no_proxy", "all_proxy",
              "TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT",
              "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT"}
SHELL_VARIABLES = {"PATH", "HOME", "PWD", "USER", "SHELL", "HOSTNAME", "IFS", "LANG"}
DEF_SECTIONS = {"setup", "files", "post", "test", "environment", "labels", "help", "runscript",
                "startscript", "arguments", "appinstall", "apphelp", "apprun", "applabels",
                "appenv", "appfiles", "appstart", "apptest"}
# Bootstrap agents whose base is named by a From header.
NEEDS_FROM = {"docker", "oras", "library", "localimage", "shub", "docker-daemon",
              "docker-archive", "oci", "oci-archive"}
AGENTS = NEEDS_FROM | {"scratch", "debootstrap", "yum", "dnf", "zypper", "arch", "busybox"}
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|([A-Za-z_][A-Za-z0-9_]*))")
TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class Problems:
    def __init__(self):
        self.lines = []
        self.packages = []  # (where, name) of packages not in install-deps.sh's lists

    def add(self, where, message):
        self.lines.append("{}: {}".format(where, message))


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def install_deps_packages(root):
    """The package names in deploy/install-deps.sh's NAME=(...) lists."""
    names = set()
    text = read(root, INSTALL_DEPS)
    for body in re.findall(r"^\s*[A-Z]+=\(([^)]*)\)", text, re.M):
        body = re.sub(r"#.*", "", body)
        names.update(w for w in body.split() if re.match(r"^[a-z0-9][a-z0-9.+-]+$", w))
    return names


def apt_cache_lookup():
    """A function giving the subset of names apt knows (one apt-cache call), or None
    where apt cannot say."""
    if not shutil.which("apt-cache") or not glob.glob("/var/lib/apt/lists/*_Packages*"):
        return None

    def known(names):
        run = subprocess.run(["apt-cache", "show", "--no-all-versions"] + sorted(names),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True)
        return set(re.findall(r"^Package: (\S+)", run.stdout, re.M))
    return known


def apt_installs(text):
    """Yields the package names of each `apt-get install` / `apt install` in shell text."""
    for m in re.finditer(r"\bapt(?:-get)?\s+install\b(.*)", text):
        for word in m.group(1).split():
            if word in ("&&", "||", ";", "|") or word[0] in ">;|&" or word.startswith("2>"):
                break
            if word.startswith("-") or any(c in word for c in "$(){}`'\"\\/"):
                continue
            yield word.split("=", 1)[0]


def check_packages(problems, where, text, listed):
    for name in apt_installs(text):
        if name not in listed:
            problems.packages.append((where, name))


def logical_lines(text):
    """Dockerfile lines joined at backslashes, without comments; heredoc bodies are
    kept with their instruction. Yields (first line number, text)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        number = i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [line]
        while parts[-1].rstrip().endswith("\\") and i < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                parts.append("\\")  # a comment inside a continuation: skipped
                continue
            parts.append(nxt)
        joined = " ".join(p for p in parts if p != "\\")
        for delimiter in re.findall(r"<<-?[\"']?([A-Za-z_]+)[\"']?", joined):
            while i < len(lines) and lines[i].strip() != delimiter:
                joined += "\n" + lines[i]
                i += 1
            i += 1
        yield number, joined


def dockerignore(root):
    path = os.path.join(root, ".dockerignore")
    rules = []
    if os.path.isfile(path):
        for line in read(root, ".dockerignore").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line.lstrip("!").strip().strip("/")
            rules.append((negate, pattern))
    return rules


def pattern_regex(pattern):
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        else:
            c = pattern[i]
            out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
            i += 1
    return re.compile("^" + out + "$")


def ignored(rules, rel):
    """Whether .dockerignore leaves rel (or a folder above it) out of the context."""
    parts = rel.split("/")
    result = False
    for negate, pattern in rules:
        regex = pattern_regex(pattern)
        if any(regex.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            result = not negate
    return result


def source_exists(root, rel):
    rel = os.path.normpath(rel)
    if rel.startswith(".."):
        return False
    if any(c in rel for c in "*?["):
        return bool(glob.glob(os.path.join(root, rel)))
    return os.path.exists(os.path.join(root, rel))


def split_flags(words):
    flags, rest = {}, []
    for w in words:
        if w.startswith("--") and not rest:
            key, _, value = w[2:].partition("=")
            flags[key] = value
        else:
            rest.append(w)
    return flags, rest


def check_dockerfile(root, problems, listed):
    text = read(root, DOCKERFILE)
    rules = dockerignore(root)
    global_args = set()
    stages = []  # names (or "") of the stages so far
    stage_vars = None  # names an instruction of the current stage may use
    for number, line in logical_lines(text):
        where = "{}:{}".format(DOCKERFILE, number)
        words = line.split()
        keyword = words[0].upper()
        args = words[1:]
        if keyword not in INSTRUCTIONS:
            problems.add(where, "unknown instruction {}".format(words[0]))
            continue
        used = {a or b for a, b in VARIABLE.findall(" ".join(args))}
        if keyword == "ARG":
            for a in args:
                name = a.split("=", 1)[0]
                (global_args if stage_vars is None else stage_vars).add(name)
            continue
        if keyword == "FROM":
            for name in sorted(used - global_args - PREDEFINED):
                problems.add(where, "${{{}}} is not declared by an ARG before the first FROM".format(name))
            flags, rest = split_flags(args)
            name = rest[2] if len(rest) >= 3 and rest[1].upper() == "AS" else ""
            stages.append(name)
            stage_vars = set()
            continue
        if stage_vars is None:
            problems.add(where, "{} before the first FROM".format(keyword))
            continue
        if keyword == "ENV":
            pairs = args if any("=" in a for a in args) else args[:1]
            stage_vars.update(a.split("=", 1)[0] for a in pairs)
        for name in sorted(used - stage_vars - PREDEFINED):
            if keyword in SHELL_FORMS:
                if name in global_args:
                    problems.add(where, "${{{0}}} is declared before the first FROM but not in this "
                                        "stage (add `ARG {0}` to it)".format(name))
                elif not re.search(r"(^|[\s;&|(])" + name + "=", line) and \
                        name not in SHELL_VARIABLES and name.upper() == name:
                    problems.add(where, "${{{}}} is not declared (no ARG or ENV in this stage)".format(name))
            else:
                problems.add(where, "${{{}}} is not declared (no ARG or ENV in this stage)".format(name))
        if keyword in ("COPY", "ADD"):
            flags, rest = split_flags(args)
            if rest and rest[0].startswith("["):  # JSON form
                rest = re.findall(r'"([^"]*)"', line)
            sources = rest[:-1]
            if "from" in flags:
                source_stage = flags["from"]
                earlier = [s for s in stages[:-1] if s] + [str(n) for n in range(len(stages) - 1)]
                if source_stage not in earlier and not re.search(r"[/:]", source_stage):
                    problems.add(where, "COPY --from={}: no earlier stage has that name".format(source_stage))
                continue
            for src in sources:
                if "$" in src or re.match(r"^[a-z]+://", src):
                    continue
                rel = os.path.normpath(src.lstrip("/"))
                if not source_exists(root, rel):
                    problems.add(where, "{} {}: no such file in the repository".format(keyword, src))
                elif rel != "." and ignored(rules, rel):
                    problems.add(where, "{} {}: left out by .dockerignore".format(keyword, src))
        if keyword == "RUN":
            check_packages(problems, where, line, listed)
    if not stages:
        problems.add(DOCKERFILE, "no FROM")


def def_stages(text):
    """Splits a definition file into stages: dicts with header, sections, first line."""
    stages = []
    current = None
    section = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        header = re.match(r"^([A-Za-z]+):\s*(.*)$", stripped)
        starts = header and header.group(1).lower() == "bootstrap"
        if current is None or (starts and (section is not None or "bootstrap" in current["header"])):
            current = {"header": {}, "sections": [], "line": number}
            stages.append(current)
            section = None
        m = re.match(r"^%(\S+)\s*(.*)$", line)
        if m:
            section = {"name": m.group(1), "args": m.group(2).strip(), "line": number, "body": []}
            current["sections"].append(section)
            continue
        if section is not None:
            section["body"].append((number, line))
        elif header:
            current["header"][header.group(1).lower()] = (header.group(2).strip(), number)
        elif stripped and not stripped.startswith("#"):
            current["header"].setdefault("?", (stripped, number))
    return stages


def check_deffile(root, problems, listed):
    text = read(root, DEFFILE)
    defaults = {}  # argument -> (default, where first declared)
    names = []
    for stage in def_stages(text):
        where = "{}:{}".format(DEFFILE, stage["line"])
        header = stage["header"]
        if "bootstrap" not in header:
            problems.add(where, "stage without a Bootstrap header")
        else:
            agent = TEMPLATE.sub("x", header["bootstrap"][0]).lower()
            if agent not in AGENTS:
                problems.add(where, "unknown bootstrap agent {}".format(header["bootstrap"][0]))
            if agent in NEEDS_FROM and "from" not in header:
                problems.add(where, "stage without a From header (Bootstrap: {})".format(agent))
        if "?" in header:
            problems.add("{}:{}".format(DEFFILE, header["?"][1]),
                         "not a header line: {}".format(header["?"][0]))
        declared = set()
        for section in stage["sections"]:
            if section["name"] != "arguments":
                continue
            for number, line in section["body"]:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, _, value = line.partition("=")
                declared.add(name.strip())
                first = defaults.setdefault(name.strip(), (value.strip(), number))
                if first[0] != value.strip():
                    problems.add("{}:{}".format(DEFFILE, number),
                                 "{} defaults to {} here but to {} on line {}".format(
                                     name.strip(), value.strip(), first[0], first[1]))
        used = [(v[1], n) for v in header.values() for n in TEMPLATE.findall(v[0])]
        for section in stage["sections"]:
            used += [(number, n) for number, line in section["body"] for n in TEMPLATE.findall(line)]
        for number, name in used:
            if name not in declared:
                problems.add("{}:{}".format(DEFFILE, number),
                             "{{{{ {} }}}} is not declared in its stage's %arguments".format(name))
        for section in stage["sections"]:
            at = "{}:{}".format(DEFFILE, section["line"])
            if section["name"] not in DEF_SECTIONS:
                problems.add(at, "unknown section %{}".format(section["name"]))
                continue
            if section["name"] == "files":
                m = re.match(r"^from\s+(\S+)$", section["args"])
                if m:
                    if m.group(1) not in names:
                        problems.add(at, "%files from {}: no earlier stage has that name".format(m.group(1)))
                    continue
                for number, line in section["body"]:
                    words = line.split()
                    if not words or words[0].startswith("#") or "{{" in words[0]:
                        continue
                    src = words[0]
                    if os.path.isabs(src):
                        problems.add("{}:{}".format(DEFFILE, number),
                                     "%files {}: use a path relative to the repository".format(src))
                    elif not source_exists(root, src):
                        problems.add("{}:{}".format(DEFFILE, number),
                                     "%files {}: no such file in the repository".format(src))
            if section["name"] in ("post", "setup", "appinstall"):
                body = re.sub(r"\\\n", " ", "\n".join(l for _, l in section["body"]))
                check_packages(problems, at, body, listed)
        if "stage" in header:
            names.append(header["stage"][0])
    if not names and len(def_stages(text)) > 1:
        problems.add(DEFFILE, "stages without Stage: names")


def commands(root, rel):
    """Yields (line number, command text) of the shell lines of a file, comment
    markers removed and continuation lines joined."""
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return
    start, parts = None, []
    for number, line in enumerate(read(root, rel).split("\n"), 1):
        line = re.sub(r"^\s*#\s?", "", line)
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []


def normal_image(name):
    name = name.strip("'\"")
    if name.startswith("localhost/"):
        name = name[len("localhost/"):]
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def check_names(root, problems):
    tags, sifs = {}, {}
    sources = [DOCKERFILE, DEFFILE, BUILD_LOCAL] + list(DOCS)
    for rel in sources:
        for number, cmd in commands(root, rel):
            where = "{}:{}".format(rel, number)
            for m in re.finditer(r"\b(?:podman|docker|buildah)\s+(?:buildx\s+)?(?:build|bud)\b(.*)", cmd):
                rest = m.group(1)
                for tag in re.findall(r"(?:^|\s)(?:-t|--tag)[\s=]+(\S+)", rest):
                    if "$" not in tag:
                        tags.setdefault(normal_image(tag), where)
                for f in re.findall(r"(?:^|\s)(?:-f|--file)[\s=]+(\S+)", rest):
                    if "$" not in f and not source_exists(root, f):
                        problems.add(where, "build command names {}, which is not in the repository".format(f))
            for m in re.finditer(r"\b(?:apptainer|singularity)\s+build\b(.*)", cmd):
                words = m.group(1).split()
                outputs = [w for w in words if w.endswith(".sif")]
                if outputs:
                    sifs.setdefault(os.path.basename(outputs[0]), where)
                    after = words[words.index(outputs[0]) + 1:]
                    if after and after[0].endswith(".def") and not source_exists(root, after[0]):
                        problems.add(where, "apptainer build names {}, which is not in the "
                                            "repository".format(after[0]))
        if rel == BUILD_LOCAL and os.path.isfile(os.path.join(root, rel)):
            for m in re.finditer(r"XMOD_IMAGE:-([^}\s]+)\}", read(root, rel)):
                tags.setdefault(normal_image(m.group(1)), rel)
    if not tags:
        problems.add(DOCKERFILE, "no documented `podman build ... -t NAME` command")
    if not sifs:
        problems.add(DEFFILE, "no documented `apptainer build NAME.sif ...` command")
    for path in sorted(glob.glob(os.path.join(root, "deploy/k8s/*.yaml"))):
        rel = os.path.relpath(path, root)
        for number, line in enumerate(read(root, rel).split("\n"), 1):
            m = re.match(r"^\s*(?:-\s+)?image:\s*([^\s#]+)", line)
            if m and normal_image(m.group(1)) not in tags:
                problems.add("{}:{}".format(rel, number),
                             "image {} is not tagged by any documented build command (they tag: {})".format(
                                 m.group(1), ", ".join(sorted(tags)) or "nothing"))
    named = 0
    for path in sorted(glob.glob(os.path.join(root, "deploy/slurm/*"))):
        rel = os.path.relpath(path, root)
        for number, line in enumerate(read(root, rel).split("\n"), 1):
            for sif in re.findall(r"[\w.-]+\.sif\b", line):
                named += 1
                if sif not in sifs:
                    problems.add("{}:{}".format(rel, number),
                                 "{} is not written by any documented apptainer build (they write: {})".format(
                                     sif, ", ".join(sorted(sifs)) or "nothing"))
    if not named:
        problems.add("deploy/slurm", "no script names the .sif to run (XMOD_SIF)")


def check(root, known="apt-cache"):
    """Runs every check on the tree at root; returns (problems, notes)."""
    problems = Problems()
    notes = []
    if known == "apt-cache":
        known = apt_cache_lookup()
        if known is None:
            notes.append("package names checked against {} only (no apt-cache or no package "
                         "lists here)".format(INSTALL_DEPS))
    listed = install_deps_packages(root)
    for rel, fn in ((DOCKERFILE, check_dockerfile), (DEFFILE, check_deffile)):
        if not os.path.isfile(os.path.join(root, rel)):
            problems.add(rel, "missing")
            continue
        fn(root, problems, listed)
    check_names(root, problems)
    if known is not None and problems.packages:
        found = known({name for _, name in problems.packages})
        for where, name in problems.packages:
            if name not in found:
                problems.add(where, "no Debian package named {} (not in {}, and apt-cache does not "
                                    "know it)".format(name, INSTALL_DEPS))
    return problems.lines, notes


# -- Self-test ---------------------------------------------------------------------
# Each broken copy: (what, file, text, replacement, words the report must contain).
BROKEN = [
    ("an unknown instruction", DOCKERFILE, "\nRUN apt-get update", "\nRUNN apt-get update",
     "unknown instruction RUNN"),
    ("a COPY of a missing file", DOCKERFILE, "COPY deploy/install-deps.sh deploy/",
     "COPY deploy/install-dep.sh deploy/", "install-dep.sh: no such file"),
    ("a RUN using an undeclared ARG", DOCKERFILE, "ARG TORCH_INDEX=", "ARG TORCH_URL=",
     "${TORCH_INDEX} is not declared"),
    ("a FROM using an undeclared ARG", DOCKERFILE, "FROM ${RUNTIME_IMAGE}", "FROM ${RUNTIME_IMG}",
     "${RUNTIME_IMG} is not declared by an ARG before the first FROM"),
    ("a RUN using a global ARG not declared again in its stage", DOCKERFILE, "WORKDIR /src\n",
     "WORKDIR /src\nRUN echo \"$BUILD_IMAGE\"\n",
     "${BUILD_IMAGE} is declared before the first FROM but not in this stage"),
    ("a COPY using an undeclared variable", DOCKERFILE, "COPY . .", "COPY ${SRC} .",
     "${SRC} is not declared"),
    ("a COPY --from naming no stage", DOCKERFILE, "COPY --from=build /out/packages",
     "COPY --from=builder /out/packages", "COPY --from=builder: no earlier stage"),
    ("a COPY source left out by .dockerignore", ".dockerignore", "/build*\n", "/build*\n/deploy\n",
     "left out by .dockerignore"),
    ("an unknown Debian package", DOCKERFILE, "openssh-server", "openssh-server-no-such",
     "no Debian package named openssh-server-no-such"),
    ("a Kubernetes image no build command tags", "deploy/k8s/coordinator.yaml", "image: xmod:latest",
     "image: xmod:v2", "image xmod:v2 is not tagged"),
    ("a Slurm .sif no apptainer build writes", "deploy/slurm/workers.sbatch", "xmod.sif",
     "xmod-cpu.sif", "xmod-cpu.sif is not written"),
    ("a def stage without Bootstrap", DEFFILE, "Bootstrap: docker\nFrom: {{ BUILD_IMAGE }}",
     "From: {{ BUILD_IMAGE }}", "stage without a Bootstrap header"),
    ("a def stage without From", DEFFILE, "From: {{ RUNTIME_IMAGE }}\n", "",
     "stage without a From header"),
    ("an unknown def section", DEFFILE, "\n%post\n", "\n%postinstall\n", "unknown section %postinstall"),
    ("a def %files source that is missing", DEFFILE, "    worker /src/worker", "    workers /src/worker",
     "%files workers: no such file"),
    ("a def argument not declared", DEFFILE, '"{{ TORCH_INDEX }}"', '"{{ TORCH_URL }}"',
     "{{ TORCH_URL }} is not declared"),
    ("a def argument with two defaults", DEFFILE, "    RUNTIME_IMAGE=debian:bookworm-slim\n\n%files from",
     "    RUNTIME_IMAGE=debian:trixie-slim\n\n%files from", "RUNTIME_IMAGE defaults to"),
    ("a def %files from naming no stage", DEFFILE, "%files from build", "%files from builder",
     "%files from builder: no earlier stage"),
    ("a documented build of a missing Dockerfile", "docs/deploy-gpu.md", "-f deploy/container/Dockerfile",
     "-f deploy/container/Containerfile", "Containerfile, which is not in the repository"),
]


def copied_sources(root):
    """The repository paths the Dockerfile's COPY/ADD and the definition's %files name."""
    paths = []
    for _, line in logical_lines(read(root, DOCKERFILE)):
        words = line.split()
        if words[0].upper() in ("COPY", "ADD"):
            flags, rest = split_flags(words[1:])
            if "from" not in flags:
                paths += [os.path.normpath(w.lstrip("/")) for w in rest[:-1] if "$" not in w]
    for stage in def_stages(read(root, DEFFILE)):
        for section in stage["sections"]:
            if section["name"] == "files" and not section["args"]:
                paths += [line.split()[0] for _, line in section["body"]
                          if line.split() and not line.split()[0].startswith("#")]
    return [p for p in paths if p != "." and not any(c in p for c in "*?[{")]


def self_test(source):
    """Copies what the checks read into a temporary tree, checks that the copy passes,
    then that each broken copy is refused with the expected words."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "repo")
        files = [DOCKERFILE, DEFFILE, BUILD_LOCAL, INSTALL_DEPS, ".dockerignore"] + list(DOCS) + [
            os.path.relpath(p, source) for p in glob.glob(os.path.join(source, "deploy/k8s/*.yaml")) +
            glob.glob(os.path.join(source, "deploy/slurm/*"))]
        for rel in files:
            os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
            shutil.copy(os.path.join(source, rel), os.path.join(base, rel))
        # What COPY and %files name: empty stand-ins of the same kind.
        for rel in copied_sources(source):
            path = os.path.join(base, rel)
            if os.path.isdir(os.path.join(source, rel)):
                os.makedirs(path, exist_ok=True)
            elif not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()

        def fake_apt(names):
            return {n for n in names if not n.endswith("-no-such")}

        lines, _ = check(base, fake_apt)
        if lines:
            failures.append("the unbroken copy is refused:\n  " + "\n  ".join(lines))
        for what, rel, old, new, expected in BROKEN:
            work = os.path.join(tmp, "broken")
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            text = read(work, rel)
            if old not in text:
                failures.append("{}: the edit does not apply ({!r} is not in {})".format(what, old, rel))
                continue
            with open(os.path.join(work, rel), "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
            lines, _ = check(work, fake_apt)
            if not any(expected in line for line in lines):
                failures.append("{}: not reported (wanted '{}'; got: {})".format(
                    what, expected, "; ".join(lines) or "nothing"))
            else:
                print("refused, as it should be: {}: {}".format(
                    what, next(line for line in lines if expected in line)))
    for line in failures:
        print("SELF-TEST FAILED: " + line)
    print("check-container-files self-test: {} broken copies, {} not refused".format(
        len(BROKEN), len(failures)))
    return 1 if failures else 0


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.normpath(os.path.join(here, "..", ".."))
    if argv[1:2] == ["--self-test"]:
        return self_test(source)
    if argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) > 1:
        source = os.path.abspath(argv[1])
    lines, notes = check(source)
    for line in lines:
        print(line)
    for note in notes:
        print("check-container-files: " + note)
    print("check-container-files: {} problem(s) in the Dockerfile, the Apptainer definition and the "
          "names deploy/k8s and deploy/slurm use".format(len(lines)))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

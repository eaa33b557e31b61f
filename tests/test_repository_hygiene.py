"""The repository speaks of the project only, and its docs' links lead somewhere.

Every tracked text file (code, comments, tests, benchmarks, docs) is scanned for the marks of how it
was written rather than what it is: periods of work numbered like a diary ("session 12", "round
three", "wave 2"), the tool or person that ran something ("a helper ran", "a session script"), and
paths of the machine where it happened (a temporary folder, a home folder, the workspace). Where
history matters the project gives a date, a commit, the measured figure and the command instead;
`git log` keeps the rest.

The patterns are precise on purpose: "session" alone is a pytest fixture scope and an HTTP word,
"round" a rounding mode and a benchmark's repetition, "assistant" a chat role, "helper" a kind of
function. ALLOWED lists the few lines where a pattern's words mean something else, each with why.

Relative links in docs/ and the README must name a file or folder that exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each pattern says what it catches; all are matched case-insensitively.
PATTERNS: dict[str, str] = {
    "a numbered period of work": r"\bsessions? \d+|\bwaves? \d+\b|\bround (?:one|two|three|four|five|six|seven|"
                                 r"eight|nine|ten)\b",
    "a period of work named as such": r"\b(?:this|next|previous|last|earlier|later) (?:session|wave)\b|"
                                      r"\bother sessions\b|\bthis round\b",
    "the one who ran it": r"\bsession (?:harness|script|probe|scripts)\b|\b(?:by|from|of) (?:a|the|another) "
                          r"(?:helper|assistant|agent session)\b|\bhelpers?'? (?:tests|ran|testing|runs)\b|"
                          r"\b\d+ (?:other )?helpers\b|\bclaude\b|\bchatgpt\b",
    "a machine path": r"(?<![\w.])/tmp\b|(?<![\w.])/work/|(?<![\w.])/home/\w|(?<![\w.])/root/|/Users/\w",
}

# (path, pattern name, the text of the match): uses where the words mean something else.
ALLOWED: set[tuple[str, str, str]] = {
    # The tests that a file path never reaches a response need machine-like paths to leak.
    ("tests/test_server_hardening.py", "a machine path", "/work/"),
    ("tests/test_server_hardening.py", "a machine path", "/root/"),
    # The POSIX fallback when TMPDIR is unset, in the CI script's mktemp.
    (".ci/run", "a machine path", "/tmp"),
}

# Text files only; vendored third-party data keeps its own words.
SKIPPED_PREFIXES = ("tests/data/json-schema-test-suite/", "benchmarks/data/realworld/")
TEXT_SUFFIXES = {".py", ".md", ".cpp", ".h", ".hpp", ".c", ".txt", ".toml", ".cfg", ".ini", ".yml", ".yaml",
                 ".json", ".js", ".css", ".html", ".sh", ".lark", ".gbnf", ""}


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in out.decode().split("\0"):
        if not name or name.startswith(SKIPPED_PREFIXES):
            continue
        path = ROOT / name
        if path.suffix in TEXT_SUFFIXES and path.is_file():
            files.append(path)
    return files


def hygiene_findings(files: list[Path]) -> list[str]:
    compiled = {name: re.compile(rx, re.IGNORECASE) for name, rx in PATTERNS.items()}
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tests/test_repository_hygiene.py":
            continue   # the patterns themselves
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for name, rx in compiled.items():
                for m in rx.finditer(line):
                    if (rel, name, m.group(0)) not in ALLOWED:
                        found.append(f"{rel}:{lineno}: {name}: {m.group(0)!r} in {line.strip()[:120]!r}")
    return found


def test_the_repository_speaks_of_the_project_only():
    found = hygiene_findings(tracked_text_files())
    assert not found, ("say it as the project does (a date, a commit, the figure, the command), or add the "
                       "use to ALLOWED with why:\n" + "\n".join(found))


@pytest.mark.parametrize("text, caught", [
    ("measured in session 25", True), ("Session 28 (7 December 2026)", True), ("issue 14, round three", True),
    ("the second wave 2 run", True), ("a session harness on the tiles", True), ("run by a helper.", True),
    ("see /tmp/s8/ttft.py", True), ("(`/tmp` probe, load 8)", True), ("cd /work/main", True),
    ("the 2 threads of 6 helpers' tests", True), ("Claude measured it", True),
    ('@pytest.fixture(scope="session")', False), ("rounds to nearest even", False),
    ("median of 3 interleaved rounds", False), ('{"role": "assistant"}', False), ("the build helper", False),
    ("sessionStorage.getItem", False), ("round-robin", False), ("7 December 2026, at c7c0995", False),
    ("~/.cache/sgrun", False), ("round {r + 1}: 12.0 tok/s", False),
])
def test_the_patterns_catch_what_they_mean(tmp_path, text, caught):
    probe = tmp_path / "probe.md"
    probe.write_text(text + "\n")
    findings = [f for f in _findings_in(probe)]
    assert bool(findings) == caught, (text, findings)


def _findings_in(path: Path) -> list[str]:
    compiled = [re.compile(rx, re.IGNORECASE) for rx in PATTERNS.values()]
    return [m.group(0) for line in path.read_text().splitlines() for rx in compiled for m in rx.finditer(line)]


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_relative_links_in_the_docs_lead_somewhere():
    docs = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    broken = []
    for doc in docs:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue   # a URL or an anchor in the same page
                path = target.split("#", 1)[0]
                if path and not (doc.parent / path).exists():
                    broken.append(f"{doc.relative_to(ROOT).as_posix()}:{lineno}: {target}")
    assert not broken, "relative links to nothing:\n" + "\n".join(broken)

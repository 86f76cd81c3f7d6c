"""Every code block of README.md and docs/**/*.md runs as written, and shows what it prints.

The conventions (docs/dev/docs_conventions.md):

* ```python blocks of a page run in order, in one namespace, in a fresh temporary
  working directory (so a page can write files and read them back later).
* A python block whose first line starts with ``>>>`` is a doctest: each expression's
  output is checked against the lines that follow it.
* An ```output block right after a python or sh block is what that block prints
  (stdout); it is checked.
* ```sh blocks run their lines: each line is ``blrgraph ARGS`` (``# comments`` and
  ``&&`` between commands allowed), run by ``blrgraph.cli.main`` in the same working directory, and must exit 0.
* ```python no-run / ```sh no-run blocks are shown, not run (each has a reason on the
  page); any other fence info string is text.
* Output comparison: text must match up to whitespace; ``...`` matches
  anything; a number matches if it agrees to the digits the page prints (half a unit
  of the page's last digit, plus a relative 1e-9).
"""
from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md"] + list((ROOT / "docs").rglob("*.md")))

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
RUNNABLE = {"python", "sh", "output"}


def blocks(text):
    """[(info words, body, line number)] of the fenced blocks of a page."""
    out = []
    for m in FENCE.finditer(text):
        out.append((m.group(1).split(), m.group(2), text[:m.start()].count("\n") + 1))
    return out


# ---- output comparison --------------------------------------------------------------------
def _tokens(text):
    """Numbers and single non-space characters; whitespace is dropped."""
    return re.findall(NUMBER + r"|\S", text)


def _close(got, want):
    digits = want.lower().split("e")[0]
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    exp = int(want.lower().split("e")[1]) if "e" in want.lower() else 0
    tol = 0.5 * 10.0 ** (exp - decimals) + 1e-9 * abs(float(want))
    return abs(float(got) - float(want)) <= tol


def _same(g, w):
    if re.fullmatch(NUMBER, w):
        return bool(re.fullmatch(NUMBER, g)) and _close(g, w)
    return g == w


def _at(got, seg, i):
    return i + len(seg) <= len(got) and all(_same(g, w) for g, w in zip(got[i:i + len(seg)], seg))


def matches(got, want):
    """True when the printed text `got` shows what the page shows (`want`): the same
    tokens (whitespace ignored), numbers equal to the digits the page prints, and
    `...` in `want` standing for any run of tokens."""
    got = _tokens(got)
    segs = [_tokens(part) for part in want.strip().split("...")]
    if len(segs) == 1:
        return len(got) == len(segs[0]) and _at(got, segs[0], 0)
    first, *middle, last = segs
    if not _at(got, first, 0):
        return False
    pos = len(first)
    for seg in middle:  # earliest place where the next piece fits
        pos = next((i for i in range(pos, len(got) - len(seg) + 1) if _at(got, seg, i)), None)
        if pos is None:
            return False
        pos += len(seg)
    end = len(got) - len(last)
    return end >= pos and _at(got, last, end)


class _Checker(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        return matches(got, want) if want.strip() else not got.strip()


# ---- running a page -----------------------------------------------------------------------
def _run_python(body, ns, name):
    if body.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(body, ns, name, name, 0)
        out = io.StringIO()
        runner = doctest.DocTestRunner(checker=_Checker(), optionflags=doctest.ELLIPSIS)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            runner.run(test, out=out.write, clear_globs=False)
        ns.update(test.globs)
        assert runner.failures == 0, f"{name}:\n{out.getvalue()}"
        return printed.getvalue()
    code = compile(body, name, "exec")
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(code, ns)
    return printed.getvalue()


def _run_sh(body, name):
    from blrgraph.cli import main
    printed = io.StringIO()
    for line in body.splitlines():
        line = line.split(" #")[0].strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        for command in line.split("&&"):
            argv = shlex.split(command)
            assert argv and argv[0] == "blrgraph", (
                f"{name}: a runnable sh block may only call blrgraph, got {command!r}; "
                "mark the block `sh no-run` and say why on the page")
            err = io.StringIO()
            status = main(argv[1:], stdout=printed, stderr=err)
            assert status == 0, f"{name}: `{command.strip()}` exited {status}: {err.getvalue()}"
    return printed.getvalue()


def run_page(path, update=False):
    """Run a page's blocks; with ``update`` return the page text with every output block
    replaced by what its block printed (``python tests/test_docs.py --update PAGE``)."""
    text = path.read_text()
    rel = path.relative_to(ROOT)
    ns = {"__name__": "__docs__"}
    last = None  # what the previous runnable block printed
    edits = []
    for m in FENCE.finditer(text):
        info, body = m.group(1).split(), m.group(2)
        lang = info[0] if info else ""
        name = f"{rel}:{text[:m.start()].count(chr(10)) + 1}"
        if "no-run" in info or lang not in RUNNABLE:
            last = None
            continue
        if lang == "output":
            assert last is not None, f"{name}: an output block must follow a python or sh block"
            if update:
                edits.append((m.start(2), m.end(2), last.rstrip() + "\n"))
            else:
                assert matches(last, body), (
                    f"{name}: the block prints\n{last}\nbut the page shows\n{body}")
            last = None
        elif lang == "python":
            last = _run_python(body, ns, name)
        else:
            last = _run_sh(body, name)
    for a, b, new in reversed(edits):
        text = text[:a] + new + text[b:]
    return text


def runnable_pages():
    return [p for p in PAGES
            if any((i[:1] in (["python"], ["sh"])) and "no-run" not in i
                   for i, _, _ in blocks(p.read_text()))]


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_page(page)


def test_no_hidden_commands():
    """A command or a doctest in an indented (unfenced) block would never be run: refuse it."""
    bad = []
    for p in PAGES:
        text = FENCE.sub("", p.read_text())
        for i, line in enumerate(text.splitlines()):
            if re.match(r"^ {4}(blrgraph |>>> |\$ blrgraph)", line):
                bad.append(f"{p.relative_to(ROOT)}: {line.strip()}")
    assert not bad, "fence these as ```sh (or ```sh no-run) blocks:\n" + "\n".join(bad)


def test_every_fence_is_known():
    """Catch typos such as ```pyhton, which would silently not run."""
    known = {"", "python", "sh", "output", "text"}
    bad = [f"{p.relative_to(ROOT)}:{line}: {' '.join(info)}"
           for p in PAGES for info, _, line in blocks(p.read_text())
           if info and info[0] not in known]
    assert not bad, bad


# ---- the checker itself ------------------------------------------------------------------
def test_matches_numbers_to_the_printed_digits():
    assert matches("elbo -32.37414563", "elbo -32.3741456")
    assert not matches("elbo -32.3751", "elbo -32.3741")
    assert matches("[0.69230769 0.0040]", "[0.6923 0.004]")
    assert not matches("[0.69230769 0.0040]", "[0.6924 0.004]")
    assert matches("a\n  b   c\n", "a b c")
    assert matches("[[-4.   4. ]\n [ 4.1  4. ]]", "[[-4.  4.]\n [ 4.1 4.]]")
    assert not matches("12", "1 2")
    assert matches("head 1\nmiddle\ntail 2", "head 1 ... tail 2")
    assert not matches("head 1 tail 2", "head 1 tail")
    assert matches("1.5e-08", "1.5e-8") and not matches("2.5e-08", "1.5e-8")
    assert matches("wrote a.csv, b.csv\nELBO -3.25", "wrote ... ELBO -3.25")
    assert not matches("wrote a.csv\nELBO -3.25", "wrote ... ELBO -3.26")


if __name__ == "__main__":  # python tests/test_docs.py --update docs/PAGE.md ...
    import sys
    import tempfile
    os.environ.setdefault("MPLBACKEND", "Agg")
    for arg in sys.argv[2:] if sys.argv[1:2] == ["--update"] else sys.argv[1:]:
        page = Path(arg).resolve()
        with tempfile.TemporaryDirectory() as tmp:
            here = os.getcwd()
            os.chdir(tmp)
            try:
                new = run_page(page, update=sys.argv[1] == "--update")
            finally:
                os.chdir(here)
        if sys.argv[1] == "--update":
            page.write_text(new)
            print(f"updated {arg}")

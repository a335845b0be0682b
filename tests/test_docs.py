"""Every example in the docstrings and the README runs and prints what it shows."""

from __future__ import annotations

import doctest
import pathlib
import re

import pytest

import cpe

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
PUBLIC = [getattr(cpe, name) for name in cpe.__all__ if callable(getattr(cpe, name))]


def run_examples(text: str, name: str) -> doctest.TestResults:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("function", PUBLIC, ids=lambda f: f.__name__)
def test_docstring_examples(function):
    doc = function.__doc__
    assert doc, f"{function.__name__} has no docstring"
    assert "Examples" in doc, f"{function.__name__} has no Examples section"
    assert ">>>" in doc, f"{function.__name__} has no examples"
    result = run_examples(doc, function.__name__)
    assert result.failed == 0
    assert result.attempted > 0


@pytest.mark.skipif(
    not README.exists(), reason="README.md is not beside the tests (installed elsewhere)"
)
def test_readme_examples():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks
    result = run_examples("\n".join(blocks), "README.md")
    assert result.failed == 0
    assert result.attempted > 0


@pytest.mark.skipif(
    not README.exists(), reason="README.md is not beside the tests (installed elsewhere)"
)
def test_readme_first_lines_are_the_install_and_test_commands():
    lines = README.read_text().splitlines()
    commands = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert commands[0].startswith("pip install . && python -c")
    assert "python -m pytest" in commands[1]


@pytest.mark.skipif(
    not README.exists(), reason="README.md is not beside the tests (installed elsewhere)"
)
def test_readme_reads_on_the_package_index():
    # The README is the package's long description: on the package index a link
    # or an image relative to the repository (or to a heading: no anchors there)
    # leads nowhere. Absolute addresses only.
    text = README.read_text()
    targets = re.findall(r"\]\(([^)]*)\)", text) + re.findall(r'src="([^"]*)"', text)
    relative = [t for t in targets if not t.startswith(("https://", "http://"))]
    assert not relative, f"relative links or images in the README: {relative}"

"""tests/support/readme.py: how the README's tested examples are found and matched (the
newcomer test, tests/integration/test_readme_newcomer.py, runs them against a platform)."""
from __future__ import annotations

import pytest

from tests.support.readme import blocks, mismatch


@pytest.mark.parametrize("expected, actual, matches", [
    (["topic greetings created"], ["topic greetings created"], True),
    (["topic greetings created"], ["topic greetings made"], False),
    (["a"], ["a", "b"], False),                                   # nothing unshown may follow
    (["a", "..."], ["a", "b", "c"], True),                        # unless a `...` line says so
    (["...", "c"], ["a", "b", "c"], True),
    (["a", "...", "c"], ["a", "c"], True),
    (["pid ..."], ["pid 4242"], True),
    (["pid ...)"], ["pid 4242"], False),
    (["3/3  ...  1,2,3"], ["3/3       2 (epoch 1)  1,2,3"], True),   # columns widen
    (["3/3 1,2,3"], ["3/3 1,2"], False),
    (["x"], [], False),
    ([], [], True),
    (["b", "a"], ["a", "b"], False),                              # order counts
])
def test_matching(expected, actual, matches):
    assert (mismatch(expected, actual) is None) == matches


def test_a_prefix_matches_what_a_running_command_printed_so_far():
    assert mismatch(["a", "b"], ["a", "b", "live view"], prefix=True) is None
    assert mismatch(["a", "b"], ["a", "live view"], prefix=True) is not None


def test_the_readme_newcomer_examples_are_well_formed():
    found = blocks("newcomer")
    assert found[0].background and [s.command for s in found[0].steps] == ["regions up"]
    assert [b.file for b in found if b.file] == ["first_steps.py"]
    for block in found:
        if not block.file:
            assert block.kind == "console" and block.steps, block
            assert all(step.command.strip() for step in block.steps), block


def test_a_marker_must_stand_above_a_code_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- readme-test: x -->\ntext\n```console\n$ true\n```\n")
    with pytest.raises(ValueError, match="must stand right above a code block"):
        blocks("x", readme)
    readme.write_text("<!-- readme-test: x retries=3 -->\n```console\n$ true\n```\n")
    with pytest.raises(ValueError, match="unknown readme-test option"):
        blocks("x", readme)

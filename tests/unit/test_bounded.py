"""launcher/bounded.py: outside values shown short and escaped in every line that quotes them."""

from __future__ import annotations

import io

from launcher.bounded import escape, listing, one_line, shorten_quoted, shown
from launcher.ui.console import Console


def test_a_string_is_quoted_escaped_and_cut_with_its_length():
    assert shown("vm1") == "'vm1'"
    assert shown("a\x1b[31mred\x07\n") == "'a\\x1b[31mred\\x07\\n'"
    assert shown("x" * 5_000_000) == "'" + "x" * 60 + "...' (5,000,000 characters)"
    assert shown("\u202eevil") == "'\\u202eevil'"  # a bidi override reads text backwards
    assert shown(b"\xff\x1b" * 100) == "'" + escape(("\ufffd\x1b" * 30)) + "...' (200 bytes)"


def test_lists_and_mappings_are_shown_briefly_with_their_size_when_cut():
    assert shown([1, "a", None]) == "[1, 'a', None]"
    assert shown({"a": [1, 2]}) == "{'a': [1, 2]}"
    assert shown(list(range(5000))) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...] (a list of 5,000 items)"
    deep = []
    for _ in range(10_000):  # nested past Python's recursion limit: still a few characters
        deep = [deep]
    assert shown(deep) == "[[[[[...]]]]]"
    shared = ["lol"] * 9
    for _ in range(8):  # the billion laughs' shape (shared lists): never expanded
        shared = [shared] * 9
    assert len(shown(shared)) < 400


def test_other_values_are_bounded_too():
    assert shown(10 ** 5000).startswith("a whole number of about 5,000 digits") or shown(10 ** 5000).endswith(
        "characters)")
    assert len(shown(10 ** 5000)) < 200
    assert shown(3.5) == "3.5" and shown(None) == "None"


def test_a_listing_names_a_few_of_many():
    assert listing(["h1", "h2"], "hosts") == "h1, h2"
    names = [f"h{i}" for i in range(20_000)]
    assert listing(names, "hosts") == "h0, h1, h2, h3, h4, h5, h6, h7, h8, h9, ... (20,000 hosts)"
    assert listing(["a\x1bb", "x" * 100], "hosts") == "'a\\x1bb', '" + "x" * 60 + "...' (100 characters)"


def test_a_validators_message_gets_the_value_shortened():
    value = "y" * 10_000
    msg = f"'{value}' is not a valid host name; use letters"
    assert shorten_quoted(msg, value) == "'" + "y" * 60 + "...' (10,000 characters) is not a valid host name; use letters"
    assert shorten_quoted("'ok' is fine", "ok") == "'ok' is fine"
    assert shorten_quoted(f"'{chr(27)}' bad", {chr(27): 1}) == "'\\x1b' bad"


def test_one_line_keeps_the_start_and_the_fix():
    text = "c.yaml:3: name: " + "z" * 100_000 + "; use letters, digits"
    line = one_line(text)
    assert len(line) < 2100 and line.startswith("c.yaml:3: name: zzz") and line.endswith("; use letters, digits")
    assert "characters cut" in line
    assert one_line("a\nb\x1b[2J") == "a\\nb\\x1b[2J"


def test_the_console_escapes_and_bounds_every_error_and_info_line():
    err = io.StringIO()
    console = Console(out=io.StringIO(), err=err, color=False)
    console.error("host \x1b]0;owned\x07 said " + "q" * 50_000)
    console.info("wrote \x1b[2J")
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in err.getvalue() and all(len(line) < 2200 for line in lines)
    assert lines[0].startswith("tfcluster: error: host \\x1b]0;owned\\x07 said qqq")
    assert lines[1] == "tfcluster: wrote \\x1b[2J"

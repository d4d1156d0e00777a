"""What a terminal would show of a program's output (`nodus.stages.terminal.collapse`):
a table of pieces in, lines and what waits for the next piece out."""

from __future__ import annotations

import pytest

from nodus.stages.terminal import collapse

BAR = "\r 10%|#         | 1/10\r 50%|#####     | 5/10\r100%|##########| 10/10"

CASES = [
    # (pending, piece, final) -> (lines, pending)
    ("plain lines stay", ("", "a\nb\n", False), (["a", "b"], "")),
    ("a program's own empty line stays", ("", "a\n\nb\n", False), (["a", "", "b"], "")),
    ("a bar's frames: the last one", ("", f"{BAR}\n", False), (["100%|##########| 10/10"], "")),
    (
        "a line after a bar",
        ("", f"loss 1\n{BAR}\ndone\n", False),
        (["loss 1", "100%|##########| 10/10", "done"], ""),
    ),
    ("CRLF line ends", ("", "a\r\nb\r\n", False), (["a", "b"], "")),
    ("cursor up and erase go", ("", "\x1b[A\x1b[2Kstep 3\n", False), (["step 3"], "")),
    ("colours go, text stays", ("", "\x1b[32mINFO\x1b[0m ok\n", False), (["INFO ok"], "")),
    ("a window title goes", ("", "\x1b]0;title\x07text\n", False), (["text"], "")),
    (
        "blank lines between frames go",
        ("", "\r 1/3\n\x1b[A\r 2/3\n\r   \n\r 3/3\n", False),
        ([" 1/3", " 2/3", " 3/3"], ""),
    ),
    ("a cleared bar keeps its last frame", ("", "\r 9/9\r     \r\n", False), ([" 9/9"], "")),
    ("a line only escapes made is dropped", ("", "\x1b[A\n", False), ([], "")),
    (
        "an unfinished bar waits, cut to its last frame",
        ("", "x\r 1/9\r 2/9", False),
        ([], "\r 2/9"),
    ),
    (
        "a frame split across two reads",
        ("\r 2/9\r 3/", "9\r 4/9\nnext\n", False),
        ([" 4/9", "next"], ""),
    ),
    ("an escape split across two reads", ("\r 5/9\x1b[", "A\r 6/9\n", False), ([" 6/9"], "")),
    (
        "an unfinished frame keeps its escape's start",
        ("", "\r 5/9\x1b[", False),
        ([], "\r 5/9\x1b["),
    ),
    (
        "a redraw still blank keeps the frame before it",
        ("", "\r 7/9\r", False),
        ([], "\r 7/9\r"),
    ),
    ("the end shows the unfinished line", ("\r 8/9", "\r 9/9", True), ([" 9/9"], "")),
    ("the end of a line that ends the text", ("", "a\n", True), (["a"], "")),
]


@pytest.mark.parametrize(("given", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_collapse(given, expected):
    pending, piece, final = given
    assert collapse(pending, piece, final=final) == expected

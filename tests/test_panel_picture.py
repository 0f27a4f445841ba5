"""A panel without a content key of its own is repainted only when its picture changes."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from specwatch.widgets.panel import picture_key


def _line(value: str, style: str = "bold") -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("tokens/s ")
    line.append(value, style=style)
    return line


def test_the_same_text_drawn_again_has_the_same_picture():
    assert picture_key(_line("11.4")) == picture_key(_line("11.4"))
    assert picture_key(Group(_line("11.4"), Text("engine · window 25 s", style="dim"))) == \
        picture_key(Group(_line("11.4"), Text("engine · window 25 s", style="dim")))


def test_a_changed_number_style_or_layout_setting_is_a_new_picture():
    assert picture_key(_line("11.4")) != picture_key(_line("11.5"))
    assert picture_key(_line("11.4")) != picture_key(_line("11.4", style="red"))
    wrapped = _line("11.4")
    wrapped.no_wrap = False
    assert picture_key(_line("11.4")) != picture_key(wrapped)
    assert picture_key(Group(_line("1"))) != picture_key(Group(_line("1"), _line("2")))


def test_what_cannot_be_compared_is_always_repainted():
    table = Table()
    table.add_column("a")
    assert picture_key(table) is None
    assert picture_key(Group(_line("1"), table)) is None

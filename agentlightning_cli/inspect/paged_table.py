"""A keyboard-driven table that draws only the rows on screen, for lists of 10,000 episodes or 100-call episodes.

Textual's DataTable measures and renders every cell through Rich (~0.4 s to draw one screen of a 100-call episode
on this project's CPU, 1.6 s to add 10,000 rows). This one holds the Python list, turns an item into its cells
(plain strings) only when its row is first drawn, and draws a line as one or two segments: a screen is ~50 rows
whatever the list's length. Column widths come from the header and the rows drawn so far (the first screenful when
the list is shown) and grow when a wider row scrolls into view. Sorting and filtering happen on the Python list,
which is then shown again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

T = TypeVar("T")
MEASURE = 200  # rows whose cells set the first column widths
MAX_WIDTH = 60  # a column (except the last) never gets wider; longer cells end in "…"
GAP = "  "
_HEADER = Style(bold=True, underline=True)
_CURSOR = Style(reverse=True)
_CURSOR_BLURRED = Style(underline=True)


class PagedTable(ScrollView, Generic[T]):
    """Rows of `items`, one line each; `render(item)` gives its cells, `style(item)` an optional row style."""

    can_focus = True
    BINDINGS = [
        Binding("up", "cursor(-1)", "up", show=False), Binding("down", "cursor(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False), Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "jump(0)", "first", show=False), Binding("end", "jump(-1)", "last", show=False),
        Binding("enter", "select", "open", show=False),
    ]
    DEFAULT_CSS = "PagedTable { height: 1fr; }"

    class RowSelected(Message):
        """Enter (or a click on the cursor's row) on a row: `item` is the list's item."""

        def __init__(self, table: PagedTable, item: Any):
            super().__init__()
            self.table = table
            self.item = item

    def __init__(self, columns: Sequence[str], render: Callable[[T], list[str]], key: Callable[[T], str],
                 style: Callable[[T], str | None] | None = None, **kw: Any):
        super().__init__(**kw)
        self._columns = list(columns)
        self._render = render
        self._style = style
        self._key = key
        self.items: list[T] = []
        self._cells: dict[int, list[str]] = {}
        self._styles: dict[str, Style] = {}
        self._widths = [len(c) for c in self._columns]
        self.cursor_row = 0

    # -- the list -----------------------------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.items)

    def get_row_at(self, row: int) -> list[str]:
        return self._row_cells(row)

    def show_items(self, items: list[T], keep_key: str | None = None) -> None:
        """Replace the rows with `items`; keeps the cursor on `keep_key`'s row when it is still there."""
        self.items = items
        self._cells = {}
        self._widths = [len(c) for c in self._columns]
        for row in range(min(MEASURE, len(items))):
            self._row_cells(row)
        index = next((i for i, it in enumerate(items) if self._key(it) == keep_key), 0) if keep_key else 0
        self._resize()
        self.cursor_row = -1
        self.move_cursor(row=index)
        self.refresh()

    def current(self) -> T | None:
        return self.items[self.cursor_row] if 0 <= self.cursor_row < len(self.items) else None

    def move_cursor(self, row: int, animate: bool = False) -> None:
        row = max(0, min(row, len(self.items) - 1))
        old, self.cursor_row = self.cursor_row, row
        if old != row:
            self._refresh_row(old)
            self._refresh_row(row)
        self._scroll_to_cursor()

    def _row_cells(self, row: int) -> list[str]:
        cells = self._cells.get(row)
        if cells is None:
            cells = self._cells[row] = [c if type(c) is str else str(c) for c in self._render(self.items[row])]
            widths = self._widths
            wider = False
            for i, cell in enumerate(cells[:-1]):
                if len(cell) > widths[i] and widths[i] < MAX_WIDTH:
                    widths[i] = min(len(cell), MAX_WIDTH)
                    wider = True
            if cells and len(cells[-1]) > widths[-1]:
                widths[-1] = len(cells[-1])
                wider = True
            if wider and self.is_mounted:
                self.call_later(self._resize)
        return cells

    def _resize(self) -> None:
        self.virtual_size = Size(sum(self._widths) + len(GAP) * (len(self._widths) - 1), len(self.items) + 1)
        self.refresh()

    # -- drawing ------------------------------------------------------------------------------------------

    def _line(self, cells: Sequence[str]) -> str:
        parts = []
        last = len(self._widths) - 1
        for i, (cell, width) in enumerate(zip(cells, self._widths)):
            if len(cell) > width and i < last:
                cell = cell[: width - 1] + "…"
            parts.append(cell.ljust(width) if i < last else cell)
        return GAP.join(parts)

    def _row_style(self, row: int) -> Style:
        name = self._style(self.items[row]) if self._style else None
        style = self._styles.get(name or "")
        if style is None:
            style = self._styles[name or ""] = Style.parse(name) if name else Style()
        if row == self.cursor_row:
            style += _CURSOR if self.has_focus else _CURSOR_BLURRED
        return style

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:  # the header stays put while rows scroll under it
            return Strip([Segment(self._line(self._columns).ljust(width + scroll_x), _HEADER)]).crop(
                scroll_x, scroll_x + width)
        row = scroll_y + y - 1
        if row >= len(self.items):
            return Strip.blank(width)
        text = self._line(self._row_cells(row))
        return Strip([Segment(text.ljust(width + scroll_x), self._row_style(row))]).crop(scroll_x, scroll_x + width)

    def _refresh_row(self, row: int) -> None:
        y = row - int(self.scroll_offset.y) + 1
        if 0 < y < self.size.height:
            self.refresh_lines(int(self.scroll_offset.y) + y)

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1 - (1 if self.show_horizontal_scrollbar else 0))
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False, immediate=True)

    def on_resize(self) -> None:
        self._scroll_to_cursor()

    def on_focus(self) -> None:
        self._refresh_row(self.cursor_row)

    def on_blur(self) -> None:
        self._refresh_row(self.cursor_row)

    # -- keys and mouse -----------------------------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 2))

    def action_jump(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self.items) - 1)

    def action_select(self) -> None:
        item = self.current()
        if item is not None:
            self.post_message(self.RowSelected(self, item))

    def on_click(self, event: Click) -> None:
        row = int(self.scroll_offset.y) + event.y - 1
        if event.y >= 1 and 0 <= row < len(self.items):
            if row == self.cursor_row:
                self.action_select()
            else:
                self.move_cursor(row)

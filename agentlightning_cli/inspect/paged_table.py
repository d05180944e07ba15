"""A DataTable that holds a long list without building a row widget for every item up front.

Textual's DataTable takes ~1.6 s to add 10,000 rows on this project's CPU; the browser must paint in well under
that. This one adds the first page and appends the next whenever the cursor comes near the end (`end` loads
everything first). Sorting and filtering happen on the Python list, which is then shown again from the top.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from textual.binding import Binding
from textual.widgets import DataTable

T = TypeVar("T")
PAGE = 200


class PagedTable(DataTable, Generic[T]):
    BINDINGS = [Binding("end", "load_all_end", "last", show=False)]

    def __init__(self, columns: Sequence[str], render: Callable[[T], list[Any]], key: Callable[[T], str], **kw: Any):
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._columns = list(columns)
        self._render = render
        self._key = key
        self.items: list[T] = []
        self._shown = 0

    def on_mount(self) -> None:
        self.add_columns(*self._columns)

    def show_items(self, items: list[T], keep_key: str | None = None) -> None:
        """Replace the rows with `items`; keeps the cursor on `keep_key`'s row when it is still there."""
        self.items = items
        self.clear()
        self._shown = 0
        index = next((i for i, it in enumerate(items) if self._key(it) == keep_key), 0) if keep_key else 0
        self._load_to(max(PAGE, index + PAGE // 2))
        if items:
            self.move_cursor(row=index, animate=False)

    def _load_to(self, count: int) -> None:
        count = min(count, len(self.items))
        if count > self._shown:
            batch = self.items[self._shown:count]
            self._shown = count  # first: adding rows may move the cursor, which may ask for more
            self.add_rows([self._render(it) for it in batch])

    def current(self) -> T | None:
        row = self.cursor_row
        return self.items[row] if 0 <= row < self._shown and row < len(self.items) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # A message, handled after the move: loading here cannot re-enter the cursor's own bookkeeping.
        if event.cursor_row >= self._shown - PAGE // 4:
            self._load_to(self._shown + PAGE)

    def action_load_all_end(self) -> None:
        self._load_to(len(self.items))
        self.move_cursor(row=len(self.items) - 1, animate=False)

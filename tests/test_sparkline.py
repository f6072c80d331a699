"""The throughput sparklines draw what Textual's own Sparkline draws for the same data, cell for cell, colours included."""

from __future__ import annotations

import random

import pytest
from rich.color import Color
from rich.console import Console
from rich.style import Style
from textual.renderables.sparkline import Sparkline

from console.ui.panes.throughput_pane import bucket_peaks, sparkline_rows, sparkline_strips

LOW, HIGH = Color.from_rgb(30, 80, 40), Color.from_rgb(90, 220, 120)


def textual_cells(values: list[float], width: int, height: int) -> list[list[tuple[str, Color | None]]]:
    console = Console(width=width, color_system="truecolor")
    lines = console.render_lines(Sparkline(values, width=width, height=height, min_color=LOW, max_color=HIGH), pad=False)
    cells = [[(char, segment.style.color if segment.style else None) for segment in line for char in segment.text] for line in lines]
    return [row + [(" ", None)] * (width - len(row)) for row in cells]  # no data: blank rows above the floor are empty lines


@pytest.mark.parametrize("count", [0, 1, 2, 7, 12, 39, 40, 41, 97, 240, 3600])
@pytest.mark.parametrize("width, height", [(40, 2), (40, 1), (17, 3)])
def test_cells_match_textuals_sparkline(count, width, height):
    rng = random.Random(count * width + height)
    values = [rng.uniform(0, 1000) for _ in range(count)]
    strips = sparkline_strips(values, width, height, Style(), LOW, HIGH)
    ours = [[(char, segment.style.color) for segment in strip for char in segment.text] for strip in strips]
    assert ours == textual_cells(values, width, height)


def test_peaks_are_each_slices_maximum_and_short_data_skips_empty_slices():
    assert bucket_peaks([1, 5, 2, 2, 9, 0], 3) == [5, 2, 9]
    assert bucket_peaks([3, 1], 4) == [3, 1]
    assert bucket_peaks([], 4) == []


def test_a_sparkline_not_laid_out_yet_has_empty_rows():
    assert sparkline_rows([1.0, 2.0], 0, 2) == [[], []]

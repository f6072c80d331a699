"""Throughput: the run's rate against its baseline, the loss, and step progress with an ETA."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from console.units import format_duration


@dataclass(frozen=True, slots=True)
class ThroughputView:
    """What the pane shows, computed by the app from RunState (the pane does no arithmetic on state)."""

    unit: str | None
    """`tok/s`, `samples/s`, `it/s`; None before the log gave any rate."""
    rates: tuple[float, ...] = ()
    """Recent rate values, oldest first (the sparkline)."""
    current: float | None = None
    average: float | None = None
    minimum: float | None = None
    baseline: float | None = None
    losses: tuple[float, ...] = ()
    step: int | None = None
    total_steps: int | None = None
    eta_s: float | None = None
    slow_fraction: float = 0.8
    stale_s: float | None = None
    """Seconds since the last rate was written when it is overdue: `current` is then history, not now."""
    per_iteration: bool = False
    """The bar prints seconds per iteration (`1.31s/it`): show the rate that way too."""
    lr: float | None = None
    grad_norm: float | None = None
    mfu: float | None = None


def si(value: float) -> str:
    """A rate in three significant figures: 14.2K, 980, 1.05M."""
    for factor, suffix in ((1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


class FigureLine(Static):
    """One fixed-height row of figures: repainted only when its text changed, never re-laid-out
    (an update with layout costs a whole screen layout, every second, for nothing)."""

    def update(self, content: Text | str = "", *, layout: bool = False) -> None:
        if content != self.content:
            super().update(content, layout=layout)


class ThroughputPane(Vertical):
    """Sparklines and figures for the run's rate and loss."""

    DEFAULT_CSS = """
    ThroughputPane {
        height: auto;
        & > Static { height: 1; }
        & Sparkline { height: 2; margin: 0 0 0 0; }
        & #loss-spark { height: 1; }
        & Sparkline > .sparkline--max-color { color: $success; }
        & Sparkline > .sparkline--min-color { color: $success 40%; }
        &.-slow Sparkline > .sparkline--max-color { color: $warning; }
        &.-slow Sparkline > .sparkline--min-color { color: $warning 40%; }
        &.-stale #rate-line, &.-stale #baseline-line { color: $warning; }
        & #loss-spark > .sparkline--max-color { color: $accent; }
        & #loss-spark > .sparkline--min-color { color: $accent 40%; }
    }
    """

    def compose(self) -> ComposeResult:
        yield FigureLine(id="rate-line")
        yield Sparkline([], id="rate-spark")
        yield FigureLine(id="baseline-line")
        yield FigureLine(id="loss-line")
        yield Sparkline([], id="loss-spark")
        yield FigureLine(id="step-line")

    def show(self, view: ThroughputView) -> None:
        """Repaint from `view`."""
        rate_line, baseline_line = self.query_one("#rate-line", Static), self.query_one("#baseline-line", Static)
        if view.unit is None or view.current is None:
            rate_line.update(Text("no rate in the log yet", style="dim"))
            baseline_line.update(Text(f"baseline {si(view.baseline)}" if view.baseline else "", style="dim"))
        else:
            self.set_class(view.stale_s is not None, "-stale")
            if view.per_iteration and view.current > 0:
                line = Text.assemble((f"{1 / view.current:.3g}", "bold"), " s/it")
            else:
                line = Text.assemble((si(view.current), "bold"), f" {view.unit}")
            if view.stale_s is not None:
                line.append(f"  last rate written {format_duration(view.stale_s)} ago", "bold")
            elif view.average is not None and view.minimum is not None:
                line.append(f" avg {si(view.average)} min {si(view.minimum)}", "dim")
            rate_line.update(line)
            if view.stale_s is not None:
                baseline_line.update(Text("no rate now: the log gives none", style="bold"))
                self.set_class(False, "-slow")
            elif view.baseline:
                ratio = view.current / view.baseline
                slow = ratio < view.slow_fraction
                baseline_line.update(
                    Text.assemble(
                        (f"{ratio:.0%}", "bold"),
                        f" of baseline {si(view.baseline)}",
                        ("  below normal" if slow else "", "bold"),
                    )
                )
                self.set_class(slow, "-slow")
            else:
                baseline_line.update(Text("no baseline in config [metrics]", style="dim"))
                self.set_class(False, "-slow")
        self.query_one("#rate-spark", Sparkline).data = list(view.rates)

        loss_line = self.query_one("#loss-line", Static)
        if view.losses:
            line = Text.assemble("loss ", (f"{view.losses[-1]:.4g}", "bold"))
        else:
            line = Text("no loss in the log yet", style="dim")
        for label, value in (("lr", view.lr), ("grad", view.grad_norm)):
            if value is not None:
                line.append(f" · {label} ")
                line.append(f"{value:.3g}", "bold")
        if view.mfu is not None:
            line.append(" · MFU ")
            line.append(f"{view.mfu:.0%}", "bold")
        loss_line.update(line)
        self.query_one("#loss-spark", Sparkline).data = list(view.losses)

        step_line = self.query_one("#step-line", Static)
        if view.step is None:
            step_line.update(Text("no step count in the log yet", style="dim"))
        elif view.total_steps:
            done = view.step / view.total_steps
            eta = "—" if view.eta_s is None or view.stale_s is not None else format_duration(view.eta_s, compact=True)
            step_line.update(
                Text.assemble(
                    "step ",
                    (f"{view.step:,}", "bold"),
                    f"/{view.total_steps:,} {done:.1%} ETA ",
                    (eta, "bold"),
                )
            )
        else:
            step_line.update(Text.assemble("step ", (f"{view.step:,}", "bold")))

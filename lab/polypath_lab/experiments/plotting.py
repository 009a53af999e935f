"""matplotlib without a display, and the conventions every lab plot follows: legends
outside the axes (they never cover data), and figures saved with room for them."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "legend_outside", "save"]


def legend_outside(ax, **kwargs) -> None:
    """The axes' legend to the right of the plotting area, top-aligned."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              **kwargs)


def save(fig, path: Path) -> None:
    """Writes ``fig`` as PNG with the outside legends included, and closes it."""
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)

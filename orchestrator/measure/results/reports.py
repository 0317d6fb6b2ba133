"""Bench reports on disk (JSON with every raw sample) and the optional PNG plot."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import BadInputError, SpecctlError
from specctl.orchestrator.files import inside, write_atomic, write_output


def save(folder: Path, profile: str, result: dict[str, Any]) -> Path:
    path = inside(folder, profile, f"-{time.strftime('%Y%m%d-%H%M%S')}.json", "profile name")
    write_atomic(path, json.dumps(result, indent=2) + "\n")
    return path


PLOT_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg")


def plot_format(out: Path) -> str:
    """The image format `out`'s name asks for (none: PNG); another is refused in one line."""
    fmt = out.suffix[1:].lower() or "png"
    if fmt not in PLOT_FORMATS:
        raise BadInputError(f"--plot {out}: not an image file's name; name a "
                            f".{', .'.join(PLOT_FORMATS)} file")
    return fmt


def check_plotting(out: Path | None = None) -> None:
    """Fail at once, not after the measuring, when plots cannot be drawn (or not as `out`)."""
    import importlib.util

    if out is not None:
        plot_format(out)
    if importlib.util.find_spec("matplotlib") is None:
        raise SpecctlError("--plot needs matplotlib: pip install 'specctl[plot]' (or drop --plot)")


def plot_bench(result: dict[str, Any], out: Path) -> None:
    check_plotting(out)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cats = [*result["categories"], "overall"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / (len(result["configs"]) + 1)
    first = next(iter(result["configs"].values()))
    ax1.bar([i for i in range(len(cats))], [first[c]["baseline_tps"] or 0 for c in cats],
            width, label="baseline")
    n = len(result["configs"])
    for j, (label, rows) in enumerate(result["configs"].items(), start=1):
        ax1.bar([i + j * width for i in range(len(cats))], [rows[c]["tps"] or 0 for c in cats],
                width, label=label)
        ax2.bar([i + (j - 1) * width for i in range(len(cats))],
                [rows[c].get("speedup") or 0 for c in cats], width, label=label)
    for ax, title, shift in ((ax1, "decode tokens/s", n / 2), (ax2, "speedup vs baseline",
                                                              (n - 1) / 2)):
        ax.set_xticks([i + width * shift for i in range(len(cats))], cats)
        ax.set_title(title)
        ax.legend()
    ax2.axhline(1.0, color="grey", linewidth=1)
    fig.suptitle(f"{result['profile']} on {result['hardware']}")
    fig.tight_layout()
    image = io.BytesIO()  # drawn in memory, then written as any file the user names is
    fig.savefig(image, dpi=100, format=plot_format(out))
    plt.close(fig)
    write_output(out, image.getvalue())

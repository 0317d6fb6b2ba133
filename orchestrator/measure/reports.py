"""Bench reports on disk (JSON with every raw sample) and the optional PNG plot."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.files import inside, write_atomic


def save(folder: Path, profile: str, result: dict[str, Any]) -> Path:
    path = inside(folder, profile, f"-{time.strftime('%Y%m%d-%H%M%S')}.json", "profile name")
    write_atomic(path, json.dumps(result, indent=2) + "\n")
    return path


def check_plotting() -> None:
    """Fail at once, not after the measuring, when plots cannot be drawn."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise SpecctlError("--plot needs matplotlib: pip install 'specctl[plot]' (or drop --plot)")


def plot_bench(result: dict[str, Any], out: Path) -> None:
    check_plotting()
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
    fig.savefig(out, dpi=100)
    plt.close(fig)

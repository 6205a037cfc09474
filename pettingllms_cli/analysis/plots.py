"""Rendering helpers shared by report.md/html and compare.md/html: PNG line plots, tables, a page.

Plots use matplotlib's Agg backend (no display); HTML pages inline them as base64 so one file
can be mailed or attached to a ticket.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from pathlib import Path

Series = dict[str, tuple[list[float], list[float]]]  # label -> (x, y)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 6px;text-align:right}th{background:#f3f3f3;font-weight:600}
td:first-child,th:first-child{text-align:left}td:first-child{overflow-wrap:break-word}
table.header th,table.header td{text-align:left;vertical-align:top}table.header th{white-space:nowrap}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}.plots{display:flex;flex-wrap:wrap;gap:8px}
.plots img{width:49%}.plots img:only-child{width:auto}
.episode{border:1px solid #ddd;border-radius:6px;padding:0.5em 1em;margin:0.5em 0;min-width:0}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:12px}.kind{font-weight:normal;color:#555}
.msg{margin:0.4em 0}.role{font-weight:bold;color:#0b5394}
.note{color:#555;font-size:0.9em;margin-left:1.5em;overflow-wrap:anywhere}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f8f8;padding:4px 8px;margin:2px 0}
.ok{color:#137333;font-weight:600}.fail{color:#a50e0e;font-weight:600}
"""


Bands = dict[str, tuple[list[float], list[float]]]  # label -> (lower, upper) at the series' x


def line_plot(
    series: Series,
    title: str,
    ylabel: str,
    xlabel: str = "step",
    bands: Bands | None = None,
    rate: bool = False,
    width: float = 5.5,
) -> bytes:
    """One PNG with a line per series; a series with a band (its 95% interval) gets it shaded in its colour. A `rate`
    (a success rate) is drawn on the whole 0..1 axis, so a small change does not look like a large one."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(width, 3.9 if rate else 3.4), dpi=100)  # inches; the page shows them at 100 dpi
    try:
        for label, (x, y) in series.items():
            (line,) = ax.plot(x, y, marker="o" if len(x) <= 30 else None, markersize=3, label=label)
            if bands and label in bands:
                ax.fill_between(x, *bands[label], color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if rate:
            ax.set_ylim(-0.03, 1.03)
        if xlabel.startswith("step"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if len(series) > 1 and rate:  # long legends over a 0..1 axis would hide the curves: below the plot
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
        elif len(series) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")  # the legend below a rate plot included
        return buf.getvalue()
    finally:
        plt.close(fig)


def write_files(files: dict[Path, str | bytes]) -> None:
    """Write each file whole or not at all (temporary file, then rename): a full disk leaves no 0-byte or cut PNG.

    Raises the first OSError; files written before it are complete.
    """
    for path, content in files.items():
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            tmp.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def data_uri(png: bytes) -> str:
    """A PNG as an inline `data:` URI.

    >>> data_uri(b"x")
    'data:image/png;base64,eA=='
    """
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def fmt(value, digits: int = 3) -> str:
    """A table cell: numbers rounded, missing values as an em dash.

    >>> fmt(0.12345), fmt(None), fmt(3), fmt(float("nan"))
    ('0.123', '—', '3', '—')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def md_table(headers: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines.

    >>> md_table(["a", "b"], [[1, 0.5]])
    ['| a | b |', '|---|---|', '| 1 | 0.500 |']
    """
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]


def breakable(name: str) -> str:
    """A name escaped for HTML, allowed to wrap after `_` and `/`, so a long spec name does not widen its table past
    the page.

    >>> breakable("team_a/solo")
    'team_<wbr>a/<wbr>solo'
    """
    return html.escape(name).replace("_", "_<wbr>").replace("/", "/<wbr>")


def html_table(headers: list[str], rows: list[list]) -> str:
    """A table whose first column names the row (wrapping at `_` and `/`)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr><td>{breakable(fmt(row[0]))}</td>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row[1:]) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_images(pngs: dict[str, bytes]) -> str:
    imgs = "".join(f'<img alt="{html.escape(name)}" src="{data_uri(png)}">' for name, png in pngs.items())
    return f'<div class="plots">{imgs}</div>'


def html_page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )

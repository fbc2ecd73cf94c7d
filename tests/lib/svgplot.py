#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/lib/svgplot.py — line charts as SVG text, with nothing but the standard library (the
host and the toolchain root have no matplotlib).

    svgplot.line_chart(series, title, xlabel, ylabel, logx=False, logy=False) -> str

series maps a name (shown in the legend) to its points [(x, y), ...], drawn in that order as a
line with a marker on every point. logx puts x on a base-2 log axis (message sizes: ticks at
powers of two, labelled 1, 64, 1K, 4M). The result is a complete SVG document; write it to a
.svg file. Bad input (no points, a value that is not finite, x <= 0 on a log axis) raises
ValueError rather than drawing something misleading.

The primitives (Scale, nice_ticks, log2_ticks, Svg) are for other small renderers, e.g. a
timeline of a trace. Tested by tests/lib/test_svgplot.py:
    python3 -m unittest discover -s tests/lib -p 'test_*.py'
"""
import math
from xml.sax.saxutils import escape, quoteattr

# Distinguishable on white, also in greyscale order (dark to light).
PALETTE = ["#1f4e9c", "#d1495b", "#2e8b57", "#e08e0b", "#6a3d9a", "#00798c", "#8c564b", "#555555"]
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"

# Chart geometry in pixels: the plot area is inside these margins; the legend sits right of it.
WIDTH, HEIGHT = 760, 420
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 78, 190, 50, 58


class Scale:
    """Maps data values in [lo, hi] onto pixels [px_lo, px_hi], linearly or by log2."""

    def __init__(self, lo, hi, px_lo, px_hi, log=False):
        if log and lo <= 0:
            raise ValueError(f"log axis needs positive values, got {lo}")
        self.log = log
        self.lo, self.hi = (math.log2(lo), math.log2(hi)) if log else (lo, hi)
        if self.hi == self.lo:  # one value: centre it in a range of its own size
            pad = abs(self.lo) * 0.5 or 1.0
            self.lo, self.hi = self.lo - pad, self.hi + pad
        self.px_lo, self.px_hi = px_lo, px_hi

    def __call__(self, value):
        v = math.log2(value) if self.log else value
        return self.px_lo + (v - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)


def nice_ticks(lo, hi, most=8):
    """Round tick values (steps of 1, 2 or 5 × 10^k) covering [lo, hi], at most `most` of them,
    the first <= lo and the last >= hi (so the axis can start and end on a tick)."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw * (1 - 1e-9))
    while True:
        first = math.floor(lo / step + 1e-9) * step
        count = math.ceil(hi / step - 1e-9) - math.floor(lo / step + 1e-9) + 1
        if count <= most:
            return [round(first + i * step, 12) for i in range(count)]
        step *= 2


def log2_ticks(lo, hi, most=10):
    """Powers of two from the one <= lo to the one >= hi, every k-th one so that at most `most`
    remain (the first is always a tick; the last only when the stride reaches it)."""
    a, b = log2_bounds(lo, hi)
    stride = max(1, math.ceil((b - a + 1) / most))
    return [2.0 ** e for e in range(a, b + 1, stride)]


def log2_bounds(lo, hi):
    """The exponents of the powers of two just around [lo, hi]: a log axis's ends."""
    return math.floor(math.log2(lo) + 1e-9), math.ceil(math.log2(hi) - 1e-9)


def format_size(value):
    """1, 512, 1K, 64K, 4M: binary-prefixed sizes for a log2 axis."""
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{int(value) >> shift}{suffix}"
    return format_number(value)


def format_number(value):
    """A tick label: integers without a point, others with up to 3 significant decimals."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}".replace(",", "\u2009")  # thin space groups thousands
    return f"{value:.3g}"


class Svg:
    """An SVG document being built: shapes appended in drawing order, text escaped."""

    def __init__(self, width, height):
        self.width, self.height = width, height
        self.parts = []

    def rect(self, x, y, w, h, fill, stroke="none", title=None, **attrs):
        self._shape("rect", dict(x=x, y=y, width=w, height=h, fill=fill, stroke=stroke, **attrs),
                    title)

    def line(self, x1, y1, x2, y2, stroke="#000", width=1, **attrs):
        self._shape("line", {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "stroke": stroke,
                             "stroke-width": width, **attrs})

    def polyline(self, points, stroke, width=2, **attrs):
        pts = " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
        self._shape("polyline", {"points": pts, "fill": "none", "stroke": stroke,
                                 "stroke-width": width, "stroke-linejoin": "round", **attrs})

    def circle(self, cx, cy, r, fill, title=None, **attrs):
        self._shape("circle", dict(cx=cx, cy=cy, r=r, fill=fill, **attrs), title)

    def text(self, x, y, content, size=12, anchor="start", rotate=None, weight=None, fill="#222"):
        attrs = {"x": x, "y": y, "font-size": size, "text-anchor": anchor, "fill": fill}
        if weight:
            attrs["font-weight"] = weight
        if rotate is not None:
            attrs["transform"] = f"rotate({rotate} {_num(x)} {_num(y)})"
        self.parts.append(f"<text {FONT} {_attrs(attrs)}>{escape(str(content))}</text>")

    def group(self, element_id):
        """Opens a <g id=...>; close it with end_group()."""
        self.parts.append(f"<g id={quoteattr(element_id)}>")

    def end_group(self):
        self.parts.append("</g>")

    def render(self):
        head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{self.width}' "
                f"height='{self.height}' viewBox='0 0 {self.width} {self.height}'>")
        back = f"<rect x='0' y='0' width='{self.width}' height='{self.height}' fill='#fff'/>"
        return "\n".join([head, back, *self.parts, "</svg>"]) + "\n"

    def _shape(self, tag, attrs, title=None):
        if title is None:
            self.parts.append(f"<{tag} {_attrs(attrs)}/>")
        else:  # a hover tooltip in browsers
            self.parts.append(f"<{tag} {_attrs(attrs)}><title>{escape(title)}</title></{tag}>")


def _num(v):
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def _attrs(attrs):
    return " ".join(f"{k.replace('_', '-')}={quoteattr(_num(v))}" for k, v in attrs.items())


def _check_series(series, logx, logy):
    if not series or not any(series.values()):
        raise ValueError("no points to plot")
    for name, points in series.items():
        for x, y in points:
            if not (math.isfinite(x) and math.isfinite(y)):
                raise ValueError(f"series {name!r}: point ({x}, {y}) is not finite")
            if (logx and x <= 0) or (logy and y <= 0):
                raise ValueError(f"series {name!r}: point ({x}, {y}) is not positive on a log axis")


def _axis_ticks(lo, hi, log, sizes=True):
    if log:
        a, b = log2_bounds(lo, hi)
        return log2_ticks(lo, hi), 2.0 ** a, 2.0 ** b, format_size if sizes else format_number
    ticks = nice_ticks(lo, hi)
    return ticks, ticks[0], ticks[-1], format_number


def line_chart(series, title, xlabel, ylabel, logx=False, logy=False, width=WIDTH, height=HEIGHT,
               subtitle=None):
    """An SVG line chart of `series` ({name: [(x, y), ...]}); see the module's docstring.
    A linear y axis starts at 0, so values are read against zero; a log one (logy, for values
    orders of magnitude apart) has power-of-two ticks in plain numbers. `subtitle`: a smaller
    line under the title (conditions, date)."""
    _check_series(series, logx, logy)
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    xticks, xlo, xhi, xfmt = _axis_ticks(min(xs), max(xs), logx)
    ylo = min(ys) if logy else min(0.0, min(ys))
    yticks, ylo, yhi, yfmt = _axis_ticks(ylo, max(ys), logy, sizes=False)
    left, right = MARGIN_LEFT, width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, height - MARGIN_BOTTOM
    sx = Scale(xlo, xhi, left, right, logx)
    sy = Scale(ylo, yhi, bottom, top, logy)

    svg = Svg(width, height)
    svg.text(width / 2, 22, title, size=15, anchor="middle", weight="bold")
    if subtitle:
        svg.text(width / 2, 38, subtitle, size=11, anchor="middle", fill="#555")
    for t in yticks:
        y = sy(t)
        svg.line(left, y, right, y, stroke="#e3e3e3")
        svg.text(left - 8, y + 4, yfmt(t), size=11, anchor="end")
    for t in xticks:
        x = sx(t)
        svg.line(x, top, x, bottom, stroke="#eeeeee")
        svg.line(x, bottom, x, bottom + 5, stroke="#444")
        svg.text(x, bottom + 19, xfmt(t), size=11, anchor="middle")
    svg.rect(left, top, right - left, bottom - top, fill="none", stroke="#444")
    svg.text((left + right) / 2, height - 14, xlabel, size=13, anchor="middle")
    svg.text(18, (top + bottom) / 2, ylabel, size=13, anchor="middle", rotate=-90)

    for i, (name, points) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        svg.group(f"series-{i}")
        pixels = [(sx(x), sy(y)) for x, y in points]
        if len(pixels) > 1:
            svg.polyline(pixels, colour, data_series=name)
        for (x, y), (px, py) in zip(points, pixels):
            svg.circle(px, py, 3.2, colour, title=f"{name}: {format_number(x)}, {format_number(y)}")
        svg.end_group()
        ly = top + 10 + 20 * i
        svg.line(right + 16, ly, right + 40, ly, stroke=colour, width=2.5)
        svg.circle(right + 28, ly, 3.2, colour)
        svg.text(right + 46, ly + 4, name, size=12)
    return svg.render()

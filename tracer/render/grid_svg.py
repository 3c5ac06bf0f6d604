"""The verdict's picture: a framework x primitive x pass grid as inline SVG (no
script, opens from disk), each cell filled by where the CPU and GPU paths part and
outlined by the class of its GPU evidence, each a link to that comparison's diff
and call graph on the framework's page."""

from __future__ import annotations

from html import escape
from typing import Callable

from markupsafe import Markup

from tracer.contract import PRIMITIVES
from tracer.processing.evidence_class import EVIDENCE_ORDER
from tracer.analysis.verdict import GridCell

#: Fill: where the paths part (the first layer showing a decision split).
PARTS = {
    "python": ("#d62728", "in Python"),
    "op": ("#ff7f0e", "at an op (C++ dispatcher / registry)"),
    "native": ("#9467bd", "in native code"),
    "library": ("#8c564b", "inside a vendor library"),
    "same": ("#2ca02c", "same path"),
    "no decision": ("#bdbdbd", "parts only where nothing is decided"),
    "no GPU pair": ("#e0e0e0", "no GPU path traced"),
}
#: Outline: the GPU evidence class, strongest darkest.
_STROKES = ("#08306b", "#2171b5", "#6baed6", "#9e9ac8", "#bcbddc", "#dadaeb")
STROKE = {ev: _STROKES[min(i, len(_STROKES) - 1)] for i, ev in enumerate(EVIDENCE_ORDER)}

_W, _H, _LEFT, _TOP = 18, 20, 90, 80


def grid_svg(cells: list[GridCell], page: Callable[[str], str]) -> Markup:
    """The grid, ``page(framework)`` naming each framework's file."""
    frameworks = list(dict.fromkeys(c.framework for c in cells))
    cols = [(p, s) for p in PRIMITIVES for s in PRIMITIVES[p].passes]
    width, height = _LEFT + len(cols) * _W + 60, _TOP + len(frameworks) * _H + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="verdict-grid" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="framework x primitive x pass grid" '
           'font-family="system-ui, sans-serif" font-size="11">']
    for i, (prim, pass_) in enumerate(cols):
        x = _LEFT + i * _W + _W / 2
        if pass_ == PRIMITIVES[prim].passes[0]:
            out.append(f'<text x="{x + _W / 2:.0f}" y="{_TOP - 22}" text-anchor="start" '
                       f'transform="rotate(-50 {x + _W / 2:.0f} {_TOP - 22})">{escape(prim)}</text>')
        out.append(f'<text x="{x:.0f}" y="{_TOP - 4}" text-anchor="middle" fill="#777" font-size="9">'
                   f'{escape(pass_[0])}</text>')
    at = {(c.framework, c.primitive, c.pass_): c for c in cells}
    for j, fw in enumerate(frameworks):
        y = _TOP + j * _H
        out.append(f'<text x="{_LEFT - 6}" y="{y + _H * 0.7:.0f}" text-anchor="end" font-weight="bold">'
                   f'{escape(fw)}</text>')
        for i, (prim, pass_) in enumerate(cols):
            c = at.get((fw, prim, pass_))
            if c is None:
                continue
            fill = PARTS.get(c.parts, PARTS["no GPU pair"])[0]
            stroke = STROKE.get(c.evidence, "#ffffff")
            href = escape(f"{page(fw)}#{c.anchor}", quote=True)
            out.append(f'<a href="{href}" class="grid-cell" data-framework="{escape(fw, quote=True)}" '
                       f'data-parts="{escape(c.parts, quote=True)}" data-evidence="{escape(c.evidence, quote=True)}">'
                       f'<title>{escape(c.title)}</title>'
                       f'<rect x="{_LEFT + i * _W + 2}" y="{y + 2}" width="{_W - 4}" height="{_H - 4}" rx="2" '
                       f'fill="{fill}" stroke="{stroke}" stroke-width="{3 if c.evidence else 1}"/></a>')
    out.append("</svg>")
    return Markup("".join(out))


def bars_svg(title: str, rows: list[tuple[str, int | None, str]], ident: str, left: int = 90,
             width: int = 380) -> Markup:
    """A horizontal bar per (label, value, note); a value of None (not measured) is said,
    never drawn as a zero. ``left``: the labels' width."""
    bar_h, scale_w = 16, 150
    top = 18
    most = max([v for _, v, _ in rows if v is not None] or [1]) or 1
    height = top + len(rows) * (bar_h + 4) + 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(ident, quote=True)}" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="11">',
           f'<text x="0" y="12" font-weight="bold">{escape(title)}</text>']
    for i, (label, value, note) in enumerate(rows):
        y = top + i * (bar_h + 4)
        out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{escape(label)}</text>')
        if value is None:
            out.append(f'<text x="{left}" y="{y + 12}" fill="#999">{escape(note or "not measured")}</text>')
            continue
        w = max(1.0, scale_w * value / most)
        out.append(f'<rect x="{left}" y="{y}" width="{w:.0f}" height="{bar_h}" fill="#4a6fa5"/>')
        out.append(f'<text x="{left + w + 4:.0f}" y="{y + 12}">{value} <tspan fill="#777">{escape(note)}</tspan>'
                   '</text>')
    out.append("</svg>")
    return Markup("".join(out))

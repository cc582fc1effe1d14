"""Draws the book's architecture diagrams as SVG files next to this script.

    python book/figures/make_diagrams.py        # rewrites book/figures/*.svg

No plotting library and no network: each diagram is a list of boxes, arrows and labels written
out as plain SVG. The symbols are the chapters' own (B, T, d, V, H, H_kv, d_head, L, E, k; r, d_r, d_n, c_t
in Chapter 12; N, P, B/N in Chapter 13).
Colours are mid-tones on a transparent background with dark text; in dark mode the theme shows
every image on a light card, so the diagrams read the same in both modes. Each file carries a
<title> and <desc> for screen readers; the chapters add alt text and a caption. In a label,
X_{ab} and X^{ab} set ab as a subscript or superscript (d_{r} is the chapter's $d_r$).
tests/book/test_book.py checks that the files in the repository are exactly what this script draws.
"""
from __future__ import annotations

import re
from html import escape
from pathlib import Path

HERE = Path(__file__).resolve().parent
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
INK = "#222"
MUTED = "#666"
BLUE, ORANGE, GREEN, RED, PURPLE, GREY = "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#8c8c8c"


SCRIPT = re.compile(r"([_^])\{([^}]*)\}")


def rich(s: str, size: float) -> str:
    """SVG text for a label: X_{ab} and X^{ab} become a lowered or raised smaller tspan."""
    if not SCRIPT.search(s):
        return escape(s)
    pieces, shift, out = SCRIPT.split(s), 0.0, []
    # pieces: text, mark, script, text, mark, script, ..., text
    for i in range(0, len(pieces), 3):
        spans = [(pieces[i], 0.0, None)]
        if i + 2 < len(pieces):
            offset = round(0.3 * size, 1) if pieces[i + 1] == "_" else round(-0.4 * size, 1)
            spans.append((pieces[i + 2], offset, round(0.72 * size, 1)))
        for text, offset, font in spans:
            if not text:
                continue
            dy = f' dy="{round(offset - shift, 1)}"' if offset != shift else ""
            small = f' font-size="{font}"' if font else ""
            out.append(f"<tspan{dy}{small}>{escape(text)}</tspan>" if dy or small else escape(text))
            shift = offset
    return "".join(out)


class Drawing:
    def __init__(self, width: int, height: int, title: str, desc: str):
        self.w, self.h, self.title, self.desc = width, height, title, desc
        self.items: list[str] = []

    def box(self, x, y, w, h, label, sub=None, color=BLUE, dashed=False, size=15, bold=False):
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self.items.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7" fill="{color}" fill-opacity="0.14" '
            f'stroke="{color}" stroke-width="1.6"{dash}/>')
        if label:
            cy = y + h / 2 + (-7 if sub else 5)
            self.text(x + w / 2, cy, label, size=size, bold=bold)
        if sub:
            self.text(x + w / 2, y + h / 2 + 13, sub, size=size - 2, color=MUTED)

    def text(self, x, y, s, size=15, anchor="middle", color=INK, bold=False, italic=False):
        weight = ' font-weight="bold"' if bold else ""
        style = ' font-style="italic"' if italic else ""
        self.items.append(f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" '
                          f'fill="{color}"{weight}{style}>{rich(s, size)}</text>')

    def arrow(self, x1, y1, x2, y2, color=INK, dashed=False):
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        self.items.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="1.6" marker-end="url(#head)"{dash}/>')

    def path(self, d, color=INK, arrow=True, dashed=False):
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        head = ' marker-end="url(#head)"' if arrow else ""
        self.items.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"{head}{dash}/>')

    def plus(self, x, y, r=11):
        self.items.append(f'<circle cx="{x}" cy="{y}" r="{r}" fill="none" stroke="{INK}" stroke-width="1.6"/>')
        self.items.append(f'<path d="M{x - r + 4} {y} H{x + r - 4} M{x} {y - r + 4} V{y + r - 4}" '
                          f'stroke="{INK}" stroke-width="1.6"/>')

    def svg(self) -> str:
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.w} {self.h}" '
            f'width="{self.w}" height="{self.h}" role="img" {FONT}>',
            f"<title>{escape(self.title)}</title>",
            f"<desc>{escape(self.desc)}</desc>",
            '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" '
            f'fill="{INK}"/></marker></defs>',
            *self.items, "</svg>", ""])


def whole_model() -> Drawing:
    d = Drawing(480, 560, "The whole model",
                "Token ids of shape (B, T) go through the embedding to the residual stream x of "
                "shape (B, T, d), through L identical LLaMA blocks, a final RMSNorm and the "
                "vocabulary head to logits of shape (B, T, V), and a softmax to probabilities.")
    cx = 240
    d.text(cx, 26, "token ids  (B, T)", bold=True)
    d.arrow(cx, 34, cx, 58)
    d.box(130, 60, 220, 48, "embedding", "one row of E (V × d) per id")
    d.arrow(cx, 108, cx, 134)
    d.text(cx + 10, 128, "x  (B, T, d)", anchor="start", color=MUTED, size=13)
    d.box(70, 136, 340, 170, "", color=GREY, dashed=True)
    d.text(86, 158, "× L blocks, each (B, T, d) → (B, T, d)", anchor="start", size=14, color=MUTED)
    d.box(110, 172, 260, 48, "x = x + Attention(RMSNorm(x))", "mixes positions, causally", size=14)
    d.arrow(cx, 220, cx, 238)
    d.box(110, 240, 260, 48, "x = x + FFN(RMSNorm(x))", "each position on its own", color=GREEN, size=14)
    d.arrow(cx, 306, cx, 332)
    d.box(150, 334, 180, 40, "final RMSNorm", color=ORANGE)
    d.arrow(cx, 374, cx, 398)
    d.box(130, 400, 220, 48, "vocabulary head", "W_{head} (V × d)", color=PURPLE)
    d.arrow(cx, 448, cx, 474)
    d.text(cx, 492, "logits  (B, T, V)", bold=True)
    d.arrow(cx, 500, cx, 522)
    d.text(cx, 542, "softmax: p(next token | tokens so far)", size=14)
    return d


def tokens() -> Drawing:
    d = Drawing(480, 420, "From text to vectors",
                "Text is encoded as UTF-8 bytes; the tokenizer applies its learned merges to get "
                "tokens; each token has an integer id in [0, V); the embedding table E of shape "
                "(V, d) turns the ids into vectors of shape (T, d).")
    cx = 240
    rows = [("text", "“lower”", BLUE), ("UTF-8 bytes", "l  o  w  e  r   (one byte each)", BLUE),
            ("BPE merges, in training order", "lo → low → lower", ORANGE),
            ("token ids  (T)", "integers in [0, V)", GREEN),
            ("embedding lookup", "row id of E (V × d)  →  x  (T, d)", PURPLE)]
    y = 14
    for i, (label, sub, color) in enumerate(rows):
        d.box(60, y, 360, 58, label, sub, color=color)
        if i < len(rows) - 1:
            d.arrow(cx, y + 58, cx, y + 80)
        y += 82
    return d


def block() -> Drawing:
    d = Drawing(480, 540, "The LLaMA block",
                "The residual stream x of shape (B, T, d) runs straight up. Each of the two "
                "sub-layers reads it through an RMSNorm (Pre-Norm), computes attention or the "
                "SwiGLU FFN, and adds its output back to the stream.")
    sx, cx = 90, 290
    d.text(sx, 528, "x  (B, T, d)", bold=True)
    d.arrow(sx, 510, sx, 412)
    d.plus(sx, 400)
    d.arrow(sx, 389, sx, 152)
    d.plus(sx, 140)
    d.arrow(sx, 129, sx, 36)
    d.text(sx, 24, "out  (B, T, d)", bold=True)
    d.text(sx - 8, 300, "residual", anchor="end", size=13, color=MUTED)
    d.text(sx - 8, 316, "stream", anchor="end", size=13, color=MUTED)
    # attention branch
    d.path(f"M{sx} 470 H{cx} V452")
    d.box(cx - 80, 412, 160, 40, "RMSNorm", color=ORANGE)
    d.arrow(cx, 412, cx, 388)
    d.box(cx - 110, 340, 220, 48, "attention", "mixes positions, causally", color=BLUE)
    d.path(f"M{cx} 340 V320 H{sx + 30} V400 H{sx + 13}")
    # FFN branch
    d.path(f"M{sx} 260 H{cx} V240")
    d.box(cx - 80, 200, 160, 40, "RMSNorm", color=ORANGE)
    d.arrow(cx, 200, cx, 176)
    d.box(cx - 110, 128, 220, 48, "FFN (SwiGLU)", "each position on its own", color=GREEN)
    d.path(f"M{cx} 128 V108 H{sx + 30} V140 H{sx + 13}")
    return d


def mha() -> Drawing:
    d = Drawing(480, 640, "Multi-head attention with shapes",
                "x of shape (B, T, d) is projected by W_Q, W_K, W_V and split into H heads of "
                "width d_head; each head computes scores Q K^T / sqrt(d_head) of shape "
                "(B, H, T, T), adds the causal mask, takes a softmax over keys and multiplies by V; "
                "the heads are merged back to (B, T, d) and projected by W_O.")
    cx = 240
    d.text(cx, 24, "x  (B, T, d)", bold=True)
    for x in (100, 240, 380):
        d.path(f"M{cx} 32 V44 H{x} V58")
    for x, name, color in ((100, "W_{Q}", BLUE), (240, "W_{K}", ORANGE), (380, "W_{V}", GREEN)):
        d.box(x - 60, 60, 120, 40, name, color=color)
        d.arrow(x, 100, x, 122)
        d.box(x - 70, 124, 140, 48, "split heads", "(B, H, T, d_{head})", color=color, size=14)
    d.text(100, 190, "Q", bold=True)
    d.text(240, 190, "K", bold=True)
    d.text(380, 190, "V", bold=True)
    d.path("M100 196 V214 H170 V228")
    d.path("M240 196 V214 H170 V228", arrow=False)
    d.box(40, 230, 260, 48, "scores  Q Kᵀ / √d_{head}", "(B, H, T, T)", color=PURPLE, size=14)
    d.arrow(170, 278, 170, 300)
    d.box(40, 302, 260, 40, "+ causal mask (−∞ above diagonal)", color=RED, size=12.5)
    d.arrow(170, 342, 170, 364)
    d.box(40, 366, 260, 40, "softmax over the keys", color=PURPLE, size=14)
    d.arrow(170, 406, 170, 432)
    d.path("M380 196 V452 H302")
    d.box(60, 434, 240, 48, "weights × V", "(B, H, T, d_{head})", color=GREEN, size=14)
    d.arrow(180, 482, 180, 504)
    d.box(80, 506, 200, 48, "merge heads", "(B, T, H · d_{head}) = (B, T, d)", size=13)
    d.arrow(180, 554, 180, 574)
    d.box(120, 576, 120, 36, "W_{O}", color=BLUE)
    d.text(330, 600, "out  (B, T, d)", bold=True)
    d.arrow(240, 594, 268, 594)
    return d


def rope_attention() -> Drawing:
    d = Drawing(480, 560, "RoPE inside attention",
                "The normalized residual stream x (B, T, d) is projected to q (B, H, T, d_head), "
                "k and v (B, H_kv, T, d_head). RoPE rotates q and k by angles set by their "
                "positions; v is never rotated. Scores q k^T / sqrt(d_head) then depend on the "
                "distance between positions only; mask, softmax, weights times v, merge heads, W_O.")
    d.text(240, 24, "x  (B, T, d)   normalized residual stream", bold=True, size=14)
    for x in (90, 240, 390):
        d.path(f"M240 32 V44 H{x} V58")
    for x, name, shape, color in ((90, "W_{Q}", "q (B, H, T, d_{head})", BLUE),
                                  (240, "W_{K}", "k (B, H_{kv}, T, d_{head})", ORANGE),
                                  (390, "W_{V}", "v (B, H_{kv}, T, d_{head})", GREEN)):
        d.box(x - 55, 60, 110, 40, name, color=color)
        d.arrow(x, 100, x, 120)
        d.text(x, 136, shape, size=12.5)
    for x in (90, 240):
        d.arrow(x, 144, x, 164)
        d.box(x - 70, 166, 140, 52, "RoPE", "rotate by positions", color=RED, size=15)
    d.text(398, 186, "never", anchor="start", size=13, color=MUTED, italic=True)
    d.text(398, 202, "rotated", anchor="start", size=13, color=MUTED, italic=True)
    d.path("M90 218 V240 H165 V256")
    d.path("M240 218 V240 H165", arrow=False)
    d.box(30, 258, 270, 52, "scores  q_{m} · k_{n} / √d_{head}", "depend on n − m only", color=PURPLE, size=14)
    d.arrow(165, 310, 165, 332)
    d.box(30, 334, 270, 40, "causal mask, softmax", color=PURPLE, size=14)
    d.arrow(165, 374, 165, 398)
    d.path("M390 144 V420 H302")
    d.box(60, 400, 240, 40, "weights × v", color=GREEN, size=14)
    d.arrow(180, 440, 180, 462)
    d.box(60, 464, 240, 40, "merge heads, W_{O}", color=BLUE, size=14)
    d.arrow(180, 504, 180, 526)
    d.text(180, 546, "out  (B, T, d)", bold=True)
    return d


def swiglu() -> Drawing:
    d = Drawing(480, 400, "The SwiGLU feed-forward network",
                "x of width d goes through two projections to width d_ff: W_gate, followed by "
                "SiLU, and W_up. Their elementwise product goes through W_down back to width d.")
    d.text(240, 24, "x  (…, d)", bold=True)
    for x in (130, 350):
        d.path(f"M240 32 V46 H{x} V62")
    d.box(60, 64, 140, 48, "W_{gate}", "d → d_{ff}", color=BLUE)
    d.box(280, 64, 140, 48, "W_{up}", "d → d_{ff}", color=GREEN)
    d.arrow(130, 112, 130, 136)
    d.box(70, 138, 120, 40, "SiLU", color=ORANGE)
    d.path("M130 178 V210 H226")
    d.path("M350 112 V210 H254")
    d.items.append(f'<circle cx="240" cy="210" r="13" fill="none" stroke="{INK}" stroke-width="1.6"/>')
    d.text(240, 216, "⊙", size=18)
    d.text(262, 240, "elementwise product  (…, d_{ff})", anchor="start", size=13, color=MUTED)
    d.arrow(240, 223, 240, 262)
    d.box(170, 264, 140, 48, "W_{down}", "d_{ff} → d", color=PURPLE)
    d.arrow(240, 312, 240, 340)
    d.text(240, 362, "out  (…, d)", bold=True)
    return d


def prefill_decode() -> Drawing:
    d = Drawing(480, 600, "Prefill and decode with the KV cache",
                "Prefill runs the T prompt tokens through the model at once and writes the keys "
                "and values of every position of every layer into the KV cache; its last logits "
                "give the first new token. Each decode step feeds one token, appends its key and "
                "value to the cache, and its query attends to every cached position.")
    d.text(20, 28, "prefill: the whole prompt at once", anchor="start", bold=True)
    for i in range(6):
        d.box(20 + i * 46, 44, 40, 32, f"x{i + 1}", color=BLUE, size=13)
    d.text(300, 66, "T prompt tokens", anchor="start", size=13, color=MUTED)
    d.arrow(150, 76, 150, 100)
    d.box(40, 102, 220, 40, "model, all T positions", color=BLUE, size=14)
    d.path("M260 122 H400 V206 H22 V261 H36")
    d.text(270, 116, "writes K, V of 0 … T−1", anchor="start", size=12.5, color=MUTED)
    d.arrow(150, 142, 150, 164)
    d.text(150, 182, "last logits → token x7", size=14)
    # the cache
    d.text(240, 232, "KV cache, per layer  (B, H_{kv}, max_len, d_{head})", bold=True, size=14)
    for i in range(10):
        filled = i < 6
        color = ORANGE if filled else GREY
        d.items.append(f'<rect x="{40 + i * 40}" y="246" width="36" height="30" rx="4" '
                       f'fill="{color}" fill-opacity="{0.35 if filled else 0.06}" stroke="{color}"/>')
    d.items.append(f'<rect x="{40 + 6 * 40}" y="246" width="36" height="30" rx="4" fill="{RED}" '
                   f'fill-opacity="0.3" stroke="{RED}" stroke-width="1.6"/>')
    d.text(58, 296, "0", size=12, color=MUTED)
    d.text(274, 296, "T", size=12, color=MUTED)
    d.text(20, 346, "decode: one token per step", anchor="start", bold=True)
    d.box(20, 362, 40, 32, "x7", color=RED, size=13)
    d.arrow(60, 378, 84, 378)
    d.box(86, 358, 230, 40, "model, one position", color=RED, size=14)
    d.path("M316 370 H358 V310 H298 V280", color=RED)
    d.text(364, 336, "append k, v", anchor="start", size=12.5, color=RED)
    d.path("M200 398 V420 H160", arrow=False)
    d.text(240, 446, "its query q reads all cached K, V:", size=13.5)
    d.text(240, 466, "a 1 × (cached + 1) row of scores per head", size=13.5)
    d.arrow(200, 478, 200, 500)
    d.text(200, 520, "next token x8 → the next decode step", size=14)
    d.path("M200 528 V560 H8 V378 H18", dashed=True)
    d.text(16, 552, "repeat", anchor="start", size=12.5, color=MUTED)
    return d


def head_sharing() -> Drawing:
    d = Drawing(480, 470, "MHA, GQA and MQA",
                "Eight query heads in each panel. Multi-head attention gives each query head its "
                "own key/value head (H_kv = H); grouped-query attention lets groups of query heads "
                "share one (here H_kv = 2, groups of 4); multi-query attention shares a single "
                "key/value head among all query heads (H_kv = 1).")
    panels = [("MHA   H_{kv} = H = 8", 8), ("GQA   H_{kv} = 2, groups of 4", 2), ("MQA   H_{kv} = 1", 1)]
    y = 14
    for title, n_kv in panels:
        d.text(20, y + 16, title, anchor="start", bold=True, size=14.5)
        qy, ky = y + 30, y + 100
        for i in range(8):
            d.box(30 + i * 54, qy, 40, 28, f"q{i}", color=BLUE, size=12.5)
        width = 432 / n_kv
        for j in range(n_kv):
            x = 30 + j * width + (width - 54) / 2 + 7
            w = 40 if n_kv == 8 else 54
            d.box(x if n_kv > 1 else 30 + 3.5 * 54 - 7, ky, w, 28, f"kv{j}", color=ORANGE, size=12.5)
        group = 8 // n_kv
        for i in range(8):
            j = i // group
            qx = 50 + i * 54
            kx = (30 + j * width + (width - 54) / 2 + 7 + (20 if n_kv == 8 else 27)) if n_kv > 1 \
                else 30 + 3.5 * 54 + 20
            d.items.append(f'<line x1="{qx}" y1="{qy + 28}" x2="{kx}" y2="{ky}" stroke="{GREY}" '
                           f'stroke-width="1.3"/>')
        y += 150
    return d


def moe() -> Drawing:
    d = Drawing(480, 470, "Mixture-of-experts routing",
                "A token x goes to the router W_r, which scores all E experts; softmax and top-k "
                "keep k of them (here E = 8, k = 2). Only the chosen experts run; their outputs "
                "are weighted by the routing weights w_e and added: y = sum of w_e FFN_e(x).")
    d.text(240, 24, "token  x  (d)", bold=True)
    d.arrow(240, 32, 240, 54)
    d.box(130, 56, 220, 48, "router  W_{r}  (E × d)", "E scores, softmax", color=PURPLE, size=14)
    d.arrow(240, 104, 240, 126)
    d.box(150, 128, 180, 36, "top-k  (k = 2)", color=PURPLE, size=14)
    chosen = (1, 6)
    for e in range(8):
        x = 24 + e * 56
        on = e in chosen
        color = GREEN if on else GREY
        dash = "" if on else ' stroke-dasharray="4 3"'
        d.items.append(f'<rect x="{x}" y="220" width="48" height="64" rx="6" fill="{color}" '
                       f'fill-opacity="{0.3 if on else 0.06}" stroke="{color}" stroke-width="1.6"{dash}/>')
        d.text(x + 24, 250, f"FFN{e}", size=12.5, color=INK if on else MUTED)
        d.text(x + 24, 268, "run" if on else "idle", size=11.5, color=INK if on else MUTED)
        if on:
            d.path(f"M240 164 V190 H{x + 24} V216")
            d.arrow(x + 24, 284, x + 24, 320)
            d.text(x + 24 + (34 if e == 6 else -34), 306, f"× w{e}", size=13)
    d.path(f"M{24 + 1 * 56 + 24} 320 V336 H{24 + 6 * 56 + 24} V320", arrow=False)
    d.arrow(240, 336, 240, 366)
    d.plus(240, 378)
    d.arrow(240, 389, 240, 412)
    d.text(240, 432, "y = w1 · FFN1(x) + w6 · FFN6(x)", bold=True, size=14.5)
    d.text(240, 456, "the other E − k experts are not run for this token", size=13, color=MUTED)
    return d


def cache_per_token() -> Drawing:
    d = Drawing(480, 286, "The KV cache of one token in one layer",
                "What one token leaves in the cache of one layer, drawn in blocks of d_h numbers with "
                "H = 8 query heads. Multi-head attention keeps a key and a value for every head, "
                "2 H d_h numbers; grouped-query attention with H_kv = 2 keeps 2 H_kv d_h; multi-head "
                "latent attention keeps one latent c_t of r numbers and one shared rope key of d_r "
                "numbers (drawn with DeepSeek-V3's proportions, r = 4 d_h and d_r = d_h / 2), "
                "whatever the number of heads. A sliding layer keeps its row only for the last W tokens.")
    unit, x0 = 26, 32

    def row(y, title, cells):
        d.text(20, y, title, anchor="start", bold=True, size=14)
        x = x0
        for label, width, color in cells:
            d.items.append(f'<rect x="{x}" y="{y + 10}" width="{width * unit - 3}" height="28" rx="4" '
                           f'fill="{color}" fill-opacity="0.3" stroke="{color}" stroke-width="1.3"/>')
            d.text(x + (width * unit - 3) / 2, y + 29, label, size=11.5)
            x += width * unit

    row(28, "MHA:  2 · H · d_{h}", [(f"k{h}", 1, BLUE) for h in range(8)] + [(f"v{h}", 1, GREEN) for h in range(8)])
    row(98, "GQA (H_{kv} = 2):  2 · H_{kv} · d_{h}", [(f"k{h}", 1, BLUE) for h in range(2)]
        + [(f"v{h}", 1, GREEN) for h in range(2)])
    row(168, "MLA:  r + d_{r}, whatever H", [("latent c_{t}  (r)", 4, ORANGE), ("", 0.5, RED)])
    d.text(x0 + 4.5 * unit + 8, 197, "k^{R}_{t}  (d_{r}): the shared rope key", anchor="start", size=12.5)
    d.text(20, 244, "one block = d_{h} numbers (H = 8 in this drawing)", anchor="start", size=13, color=MUTED)
    d.text(20, 268, "a sliding layer stores the same row, but only for the last W tokens", anchor="start",
           size=13, color=MUTED)
    return d


def mla() -> Drawing:
    d = Drawing(480, 592, "Multi-head Latent Attention",
                "The token's hidden state x_t of width d goes through W_DKV to r + d_r numbers. The first "
                "r, after an RMSNorm, are the latent c_t; the last d_r, rotated by RoPE, are the key "
                "k^R_t shared by all heads. Only c_t and k^R_t are cached. Per head h, W_UK and W_UV "
                "rebuild a key of d_n and a value of d_v numbers from c_t; the score adds the query's "
                "nope part against that key and its rotated rope part against k^R_t, divided by "
                "sqrt(d_n + d_r). The absorbed form folds W_UK into the query and applies W_UV after "
                "the weighted sum of the latents, so no per-head key or value is built.")
    d.text(240, 24, "x_{t}  (d): one token, normalized", bold=True, size=14)
    for x in (75, 315):
        d.path(f"M240 32 V42 H{x} V56")
    # queries
    d.box(10, 58, 130, 104, "", color=BLUE)
    d.text(75, 78, "queries", bold=True, size=13.5)
    d.text(75, 98, "W_{DQ}, RMSNorm, W_{UQ}", size=12)
    d.text(75, 116, "per head h:", size=12, color=MUTED)
    d.text(75, 134, "q^{(h)}_{nope}  (d_{n})", size=12.5)
    d.text(75, 153, "R_{m} q^{(h)}_{rope}  (d_{r})", size=12.5)
    # the down-projection and the two cached parts
    d.box(160, 58, 310, 40, "W_{DKV}:  d → r + d_{r}", color=ORANGE, size=14)
    d.arrow(240, 98, 240, 120)
    d.arrow(407, 98, 407, 120)
    d.box(170, 122, 140, 36, "RMSNorm", color=ORANGE, size=13.5)
    d.box(345, 122, 125, 36, "RoPE, position t", color=RED, size=13)
    d.arrow(240, 158, 240, 182)
    d.arrow(407, 158, 407, 182)
    d.box(160, 172, 316, 86, "", color=RED, dashed=True)
    d.box(170, 184, 140, 42, "c_{t}  (r)", "the latent", color=ORANGE, size=14)
    d.box(345, 184, 125, 42, "k^{R}_{t}  (d_{r})", "one key, all heads", color=RED, size=14)
    d.text(318, 248, "cached: r + d_{r} numbers per token and layer", size=12.5, color=RED, bold=True)
    # expansion per head
    d.arrow(240, 258, 240, 282)
    d.box(160, 284, 160, 46, "W^{(h)}_{UK}, W^{(h)}_{UV}", "per head h = 1 … H", color=GREEN, size=13.5)
    d.arrow(240, 330, 240, 350)
    d.text(240, 366, "k^{(h)}_{nope} (d_{n}),  v^{(h)} (d_{v})", size=12.5)
    d.text(405, 300, "shared by", size=12, color=MUTED, italic=True)
    d.text(405, 315, "all H heads", size=12, color=MUTED, italic=True)
    d.arrow(75, 162, 75, 390)
    d.arrow(240, 374, 240, 390)
    d.arrow(455, 258, 455, 390)
    d.box(10, 392, 460, 52, "(q^{(h)}_{nope} · k^{(h)}_{nope}  +  R_{m} q^{(h)}_{rope} · k^{R}_{t}) / √(d_{n} + d_{r})",
          "score of head h for the cached token t", color=PURPLE, size=13.5)
    d.arrow(240, 444, 240, 464)
    d.text(240, 480, "softmax over t, weights × v^{(h)}, merge heads, W_{O}  →  out (d)", size=13)
    # the absorbed form
    d.box(10, 500, 460, 80, "", color=GREEN, dashed=True)
    d.text(22, 520, "absorbed form (decode): no per-head key or value is built", anchor="start", bold=True, size=13)
    d.text(22, 542, "q^{(h)}_{nope} · (W^{(h)}_{UK} c_{t})  =  (W^{(h)T}_{UK} q^{(h)}_{nope}) · c_{t}", anchor="start",
           size=13)
    d.text(22, 566, "Σ_{t} a_{t} W^{(h)}_{UV} c_{t}  =  W^{(h)}_{UV} (Σ_{t} a_{t} c_{t})", anchor="start", size=13)
    return d


def sliding_window() -> Drawing:
    d = Drawing(480, 516, "A sliding window and its rolling cache",
                "Top: the mask of T = 8 positions with a window of W = 3; query i may "
                "attend to key j when i - W < j <= i, a band of width W along the diagonal. Bottom: the "
                "rolling buffer of W slots; position p is written to slot p mod W, over position p - W, "
                "which no later query can see. After position 7 the slots hold 6, 7 and 5.")
    n, w, cell, x0, y0 = 8, 3, 23, 48, 66
    d.text(20, 24, "the banded mask  (T = 8, W = 3)", anchor="start", bold=True, size=14)
    d.text(x0 + n * cell / 2, y0 - 10, "key j →", size=12.5, color=MUTED)
    d.text(20, y0 - 10, "query i ↓", size=12.5, color=MUTED, anchor="start")
    for i in range(n):
        d.text(x0 - 10, y0 + i * cell + 16, str(i), size=11.5, color=MUTED)
        d.text(x0 + i * cell + cell / 2, y0 + n * cell + 16, str(i), size=11.5, color=MUTED)
        for j in range(n):
            seen = i - w < j <= i
            past = j <= i - w
            color = BLUE if seen else GREY
            opacity = 0.55 if seen else (0.18 if past else 0.04)
            d.items.append(f'<rect x="{x0 + j * cell}" y="{y0 + i * cell}" width="{cell - 2}" '
                           f'height="{cell - 2}" rx="2" fill="{color}" fill-opacity="{opacity}" '
                           f'stroke="{color}" stroke-opacity="0.5"/>')
    lx = x0 + n * cell + 30
    for k, (label, rule, color, opacity) in enumerate([("attends", "i − W < j ≤ i", BLUE, 0.55),
                                                       ("outside the window", "j ≤ i − W", GREY, 0.18),
                                                       ("the future", "j > i", GREY, 0.04)]):
        y = y0 + 12 + k * 44
        d.items.append(f'<rect x="{lx}" y="{y - 14}" width="18" height="18" rx="2" fill="{color}" '
                       f'fill-opacity="{opacity}" stroke="{color}" stroke-opacity="0.5"/>')
        d.text(lx + 26, y, label, anchor="start", size=13)
        d.text(lx + 26, y + 18, rule, anchor="start", size=12.5, color=MUTED)
    d.text(lx, y0 + 150, "each query sees at most W keys:", anchor="start", size=12.5, color=MUTED)
    d.text(lx, y0 + 168, "a band along the diagonal", anchor="start", size=12.5, color=MUTED)
    # rolling buffer
    top = 300
    d.text(20, top, "the rolling cache: W slots, position p → slot p mod W", anchor="start", bold=True, size=14)
    for slot in range(w):
        y = top + 22 + slot * 50
        d.text(20, y + 26, f"slot {slot}", anchor="start", size=13)
        written = [p for p in range(n) if p % w == slot]
        for k, p in enumerate(written):
            x = 90 + k * 110
            last = k == len(written) - 1
            color = ORANGE if last else GREY
            d.items.append(f'<rect x="{x}" y="{y + 6}" width="80" height="30" rx="4" fill="{color}" '
                           f'fill-opacity="{0.35 if last else 0.08}" stroke="{color}" stroke-width="1.4"/>')
            d.text(x + 40, y + 26, f"p = {p}", size=13, color=INK if last else MUTED)
            if not last:
                d.arrow(x + 82, y + 21, x + 106, y + 21, color=GREY)
    d.text(20, top + 186, "→ overwritten by position p + W, which no later query needs;",
           anchor="start", size=12.5, color=MUTED)
    d.text(20, top + 206, "after p = 7 the slots hold 6, 7, 5: the last W positions", anchor="start", size=12.5,
           color=MUTED)
    return d


def _memory(d: Drawing, x: float, y: float, shard: int | None, n: int) -> None:
    """One GPU's training state, 4 px per byte per parameter: weights 2, gradients 2, AdamW 12.
    With shard=None the GPU holds all of it; with shard=i only the i-th of n slices."""
    width, top = 84, y
    for color, height in ((BLUE, 8), (ORANGE, 8), (GREEN, 48)):
        for i in range(n if shard is not None else 1):
            part = width / n if shard is not None else width
            held = shard is None or i == shard
            dash = "" if held else ' stroke-dasharray="3 3"'
            d.items.append(f'<rect x="{x + i * part}" y="{top}" width="{part - (1 if shard is not None else 0)}" '
                           f'height="{height}" fill="{color}" fill-opacity="{0.55 if held else 0.04}" '
                           f'stroke="{color}" stroke-width="1"{dash}/>')
        top += height + 2


def data_parallel() -> Drawing:
    n = 4
    d = Drawing(480, 620, "Data parallel and fully sharded data parallel",
                "Top, DDP: the batch of B rows is cut into N = 4 slices of B/N rows, one per GPU; every "
                "GPU holds the whole model, its gradients and its AdamW state, (2 + 2 + 12) P bytes; "
                "after the backward pass one all-reduce averages the gradients and every GPU takes the "
                "same step. Bottom, FSDP (ZeRO-3): each GPU keeps only its 1/N slice of the weights, "
                "gradients and optimizer state, 16 P / N bytes; each block's weights are all-gathered "
                "just before its forward and its backward pass, its gradients reduce-scattered, and each "
                "GPU updates its own slice.")
    xs = [22 + i * 116 for i in range(n)]
    legend = [("weights 2P", BLUE, 20), ("gradients 2P", ORANGE, 150), ("AdamW state 12P", GREEN, 300)]
    for label, color, x in legend:
        d.items.append(f'<rect x="{x}" y="14" width="14" height="14" fill="{color}" fill-opacity="0.55" '
                       f'stroke="{color}"/>')
        d.text(x + 20, 26, label, anchor="start", size=13)
    for panel, (top, title) in enumerate([(62, "DDP: every GPU a whole copy"),
                                          (330, "FSDP (ZeRO-3): every GPU a 1/N slice")]):
        d.text(20, top, title, anchor="start", bold=True, size=14.5)
        d.text(20, top + 26, "a batch of B rows, N = 4 GPUs:", anchor="start", size=12.5, color=MUTED)
        for i, x in enumerate(xs):
            d.box(x + 8, top + 34, 84, 22, "B/N rows", color=GREY, size=11.5)
            d.arrow(x + 50, top + 56, x + 50, top + 70)
            d.box(x, top + 72, 100, 100, "", color=GREY)
            d.text(x + 50, top + 90, f"GPU {i} (rank {i})", size=12)
            _memory(d, x + 8, top + 98, None if panel == 0 else i, n)
        if panel == 0:
            d.text(460, top, "(2 + 2 + 12) P bytes each", anchor="end", size=12.5, color=MUTED)
            d.box(20, top + 186, 440, 50, "all-reduce the gradients (their mean)",
                  "2 (N − 1)/N · P sent per GPU; then the same AdamW step everywhere", color=RED, size=13.5)
        else:
            d.text(460, top, "16 P / N bytes each", anchor="end", size=12.5, color=MUTED)
            d.box(20, top + 186, 440, 44, "all-gather each block's weights, just in time",
                  "before its forward and again before its backward; freed after", color=PURPLE, size=13.5)
            d.box(20, top + 236, 440, 44, "reduce-scatter each block's gradients",
                  "each rank keeps the mean of its slice and updates only that slice", color=RED, size=13.5)
    return d


def tensor_parallel() -> Drawing:
    d = Drawing(480, 650, "A tensor-parallel LLaMA block",
                "Two ranks, N = 2. The activations x of shape (B, T, d) are the same on both ranks; each "
                "applies the RMSNorm itself. q_proj, k_proj and v_proj are column-parallel: each rank "
                "holds whole heads, H/N query heads and H_kv/N key/value heads, and computes attention "
                "for them. o_proj is row-parallel: each rank multiplies its heads' columns and gets a "
                "partial sum of shape (B, T, d); one all-reduce adds them, then the residual. In the "
                "FFN, gate_proj and up_proj are column-parallel over d_ff/N hidden units each, SiLU and "
                "the product stay local, down_proj is row-parallel and a second all-reduce sums its "
                "partial outputs.")
    d.text(240, 22, "x  (B, T, d): the same on every rank", bold=True, size=14)
    for i, cx in enumerate((130, 350)):
        d.path(f"M240 30 V40 H{cx} V62")
        d.text(cx + 8, 56, f"rank {i}", anchor="start", bold=True, size=13, color=MUTED)
        d.box(cx - 80, 64, 160, 30, "RMSNorm", color=ORANGE, size=13)
        d.arrow(cx, 94, cx, 108)
        d.box(cx - 100, 110, 200, 44, "q_proj, k_proj, v_proj", "column-parallel", color=BLUE, size=13.5)
        d.arrow(cx, 154, cx, 168)
        d.box(cx - 100, 170, 200, 44, "attention, its own heads", "H/N query, H_{kv}/N kv heads", color=BLUE,
              size=13.5)
        d.arrow(cx, 214, cx, 228)
        d.box(cx - 100, 230, 200, 44, "o_proj", "row-parallel → partial sum", color=PURPLE, size=13.5)
        d.arrow(cx, 274, cx, 292)
        d.arrow(cx, 336, cx, 352)
        d.box(cx - 80, 354, 160, 30, "RMSNorm", color=ORANGE, size=13)
        d.arrow(cx, 384, cx, 398)
        d.box(cx - 100, 400, 200, 44, "gate_proj, up_proj", "column-parallel, d_{ff}/N units", color=GREEN,
              size=13.5)
        d.arrow(cx, 444, cx, 458)
        d.box(cx - 100, 460, 200, 32, "SiLU(gate) ⊙ up", color=GREEN, size=13)
        d.arrow(cx, 492, cx, 506)
        d.box(cx - 100, 508, 200, 44, "down_proj", "row-parallel → partial sum", color=PURPLE, size=13.5)
        d.arrow(cx, 552, cx, 570)
    for y in (294, 572):
        d.box(20, y, 440, 42, "all-reduce: sum the partial outputs, add the residual", "(B, T, d) on every rank",
              color=RED, size=13.5)
    d.text(240, 640, "one all-reduce per sub-layer", size=13, color=MUTED, italic=True)
    return d


DIAGRAMS = {"model": whole_model, "tokens": tokens, "block": block, "mha": mha,
            "rope_attention": rope_attention, "swiglu": swiglu, "prefill_decode": prefill_decode,
            "head_sharing": head_sharing, "moe": moe, "cache_per_token": cache_per_token, "mla": mla,
            "sliding_window": sliding_window, "data_parallel": data_parallel, "tensor_parallel": tensor_parallel}


def render() -> dict[str, str]:
    return {f"{name}.svg": draw().svg() for name, draw in DIAGRAMS.items()}


if __name__ == "__main__":
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print("wrote", HERE / name)

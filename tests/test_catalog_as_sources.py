"""Catalog values whose source says "as <another card>" carry that card's value (issue 35: stale copies).

A source line "assumption: as the H100 SXM" states that the value is the H100 SXM entry's. When that entry
moves (a refit, a better published figure), every copy must move with it, or the copy's source is false. The
rule is checked generically: every source of catalogs/performance.toml and catalogs/accelerators.toml is
parsed for "as [the] <name>", the name resolved to a catalog card (its id spelled in words, "H100 SXM" ->
h100-sxm, or the bare chip name of the part the catalog takes as its reference), and the two values compared
(performance values as the catalog reads them, [default] and derived_from applied; accelerator values as
written).
"""

from __future__ import annotations

import re
from typing import Any

from tpopt.catalogs import load_catalog

CAT = load_catalog([])
IDS = set(CAT.raw["accelerators"])
BARE = {"h100": "h100-sxm", "gb200": "gb200-nvl72", "a100": "a100-80gb-sxm", "flashattention-3-on-h100": "h100-sxm"}
"""Names the sources use for a card without its id: the bare chip names of the part the catalog's sources
mean by them (the H100 = the SXM part FlashAttention-3 was measured on), and FlashAttention-3's H100."""
AS = re.compile(r"\bas (?:the )?([^;,()]+)")


def card_named(phrase: str) -> str | None:
    """The catalog card a phrase starts with: its longest run of leading words that spells a card id (or a
    bare name of :data:`BARE`); None when it names none ("as DGX H100", "as cuBLAS's")."""
    words = re.findall(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*", phrase)
    for n in range(len(words), 0, -1):
        key = "-".join(words[:n]).lower()
        if key in IDS:
            return key
        if key in BARE:
            return BARE[key]
    return None


def perf_value(acc: str, key: str) -> Any:
    return getattr(CAT.perf(acc), key, None)


def acc_value(acc: str, key: str) -> Any:
    return CAT.raw["accelerators"].get(acc, {}).get(key)


def copies() -> list[tuple[str, str, str, str, Any, Any]]:
    """(file, card, key, the card named, this card's value, that card's value) for every "as <card>" source."""
    out = []
    for name, value in (("performance", perf_value), ("accelerators", acc_value)):
        for card, entry in CAT.raw[name].items():
            if not isinstance(entry, dict):
                continue
            for key, src in entry.get("sources", {}).items():
                for m in AS.finditer(str(src)):
                    ref = card_named(m.group(1))
                    if ref is not None and ref != card and value(ref, key) is not None:
                        out.append((name, card, key, ref, value(card, key), value(ref, key)))
    return out


def test_the_parser_reads_the_catalogs_copies() -> None:
    """The rule bites: it finds the copies the catalogs state (H100 variants' attention, B300's NVLink and
    FP4 shares, the A800's and H800's prices), not an empty list."""
    found = {(f, c, k, r) for f, c, k, r, _, _ in copies()}
    assert ("performance", "h800", "attention_efficiency", "h100-sxm") in found
    assert ("performance", "h100-pcie", "attention_efficiency", "h100-sxm") in found
    assert ("performance", "b300", "tp_efficiency", "b200") in found
    assert ("accelerators", "h800", "price_card_hour", "h100-sxm") in found
    assert len(found) >= 20


def test_a_value_stated_as_another_cards_is_that_cards() -> None:
    stale = [f"{f}.toml [{c}] {k} = {a!r}, but its source says as {r} ({b!r})"
             for f, c, k, r, a, b in copies() if a != b]
    assert not stale, "\n".join(stale)


def test_the_h100_variants_carry_flashattention3s_causal_share() -> None:
    """Shah et al. 2024 (FlashAttention-3), Figure 5(d): causal forward, head dim 128, 602 TFLOPS at 8K tokens
    on the H100 SXM5's 989 dense BF16 TFLOPS: 602 / 989 = 0.609, 0.61 in the catalog; the H100 PCIe, H100 NVL,
    H200 NVL and H800 entries state theirs as the H100 SXM's."""
    share = round(602 / 989, 2)
    for acc in ("h100-sxm", "h100-pcie", "h100-nvl", "h200-nvl", "h800"):
        assert CAT.perf(acc).attention_efficiency == share, acc

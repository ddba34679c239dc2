"""WebShop's purchase score (``web_agent_site/engine/goal.py::get_reward`` in the copy verl-agent and
so ARLArena run), in our own words.

    score = r_type × (attribute matches + option matches + [price ≤ bound])
                   / (#goal attributes + #goal options + 1)

* an attribute matches when one of the product's attributes (its full list) is a fuzzy match
  (token-set ratio > 85) or the goal attribute appears in the title, bullets or description;
* options: each chosen value is first shrunk to the first colour word of WebShop's colour list it
  contains ("navy blue" → "blue", "rose gold" → "gold", "standard" → "tan"); each goal option is
  the pair (name, value), which becomes its colour word when the value (or name) *is* one, and
  otherwise is fuzzy-matched as its "name value" text (thefuzz turns the pair into a string).
  A goal option matches when some chosen value has token-set ratio > 85 with it. So "x-large"
  does not satisfy "large" (ratio 83) but "large" satisfies "x-large" (a token subset, 100);
* ``r_type`` is 1 when the product type agrees (same query, ≥ 2 shared category levels, or title
  word overlap > 0.2), 0.5 when none of those holds, 0.1 below 0.1 title overlap, 0 with none.

The token-set ratio is thefuzz's (strings ASCII-folded, non-alphanumerics to spaces, lower case;
the best of the three sorted-token comparisons; Levenshtein/Indel ratio, ``2·LCS / (|a|+|b|)``,
rounded). One difference remains: the title words of ``r_type`` are non-stopword tokens where
WebShop takes spaCy's nouns, so no language model is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from arlgym.envs.webshop.catalog import Goal, Product

__all__ = ["token_set_ratio", "normalize_color", "purchase_score", "ScoreBreakdown", "COLOR_SET"]

#: WebShop's colour words (``web_agent_site/engine/normalize.py``), in its order
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper",
    "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso",
    "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum",
    "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger",
    "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow")

_WORD = re.compile(r"[a-z0-9']+")
_NON_WORD = re.compile(r"(?ui)\W")
_STOPWORDS = frozenset(
    "a an and the for with of in on to by from at or is are be this that it its your you our "
    "set pack piece pcs count ounce oz inch x".split())


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _full_process(s: Any) -> str:
    """thefuzz's ``utils.full_process``: ``str()``, ASCII only, non-alphanumerics → space, lower."""
    s = str(s).encode("ascii", "ignore").decode()
    return _NON_WORD.sub(" ", s).lower().strip()


def _lcs(a: str, b: str) -> int:
    """Length of the longest common subsequence (bit-parallel, Hyyrö 2004)."""
    if not a or not b:
        return 0
    masks: dict[str, int] = {}
    for i, ch in enumerate(a):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for ch in b:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def _ratio(a: str, b: str) -> float:
    """Levenshtein's ``ratio`` (Indel similarity) on 0–100."""
    if not a or not b:
        return 0.0
    return 200.0 * _lcs(a, b) / (len(a) + len(b))


@lru_cache(maxsize=65536)
def _token_set_ratio(a: str, b: str) -> int:
    ta, tb = set(a.split()), set(b.split())
    if not ta or not tb:
        return 0
    sect = " ".join(sorted(ta & tb))
    ab = (sect + " " + " ".join(sorted(ta - tb))).strip()
    ba = (sect + " " + " ".join(sorted(tb - ta))).strip()
    return int(round(max(_ratio(sect, ab), _ratio(sect, ba), _ratio(ab, ba))))


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (0–100; non-strings are ``str()``-ed, as thefuzz does)."""
    return _token_set_ratio(_full_process(a), _full_process(b))


def normalize_color(option: Any) -> Any:
    """WebShop's ``normalize_color``: the first colour word ``in`` the option — a substring of a
    string, an element of a (name, value) pair — else the option unchanged."""
    for color in COLOR_SET:
        if color in option:
            return color
    return option


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    score: float
    r_type: float
    attribute_matches: int
    option_matches: int
    price_ok: bool
    title_score: float


def _type_reward(product: Product, goal: Goal) -> tuple[float, float]:
    query_match = product.query == goal.query
    levels = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(levels & wanted) >= 2
    desired = {t for t in _tokens(goal.name) if t not in _STOPWORDS}
    bought = {t for t in _tokens(product.name) if t not in _STOPWORDS}
    title_score = len(desired & bought) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score


def _attribute_matches(product: Product, goal: Goal) -> int:
    title, bullets, description = product.name.lower(), " ".join(product.bullets).lower(), product.description.lower()
    matches = 0
    for wanted in goal.attributes:
        if any(token_set_ratio(have, wanted) > 85 for have in product.attributes) or (
                wanted in title or wanted in bullets or wanted in description):
            matches += 1
    return matches


def option_matches(chosen: list[str], goal: Goal) -> int:
    """How many goal options some chosen value matches (see the module docstring)."""
    picked = [normalize_color(v) for v in chosen]
    wanted = ([normalize_color(item) for item in goal.options.items()] if isinstance(goal.options, dict)
              else [normalize_color(v) for v in goal.options])
    return sum(1 for g in wanted if any(token_set_ratio(p, g) > 85 for p in picked))


def purchase_score(product: Product, chosen_options: dict[str, str], goal: Goal) -> ScoreBreakdown:
    """Score of buying ``product`` with ``chosen_options`` for ``goal`` (1.0: exactly right)."""
    r_type, title_score = _type_reward(product, goal)
    attrs = _attribute_matches(product, goal)
    opts = option_matches(list(chosen_options.values()), goal)
    price_ok = product.price <= goal.price_upper
    total = (attrs + opts + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return ScoreBreakdown(round(total * r_type, 6), r_type, attrs, opts, price_ok, title_score)

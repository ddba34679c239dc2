"""WebShop's purchase score (``web_agent_site/engine/goal.py::get_reward``), in our own words.

    score = r_type × (attribute matches + option matches + [price ≤ bound])
                   / (#goal attributes + #goal options + 1)

* an attribute matches when a product attribute is a fuzzy match (token-set ratio > 85) or the
  attribute text appears in the title, bullets or description;
* an option matches when a chosen option value is a fuzzy match of the goal's value;
* ``r_type`` is 1 when the product type agrees (same query, ≥ 2 shared category levels, or title
  word overlap > 0.2), 0.5 when none of those holds, 0.1 below 0.1 title overlap, 0 with none.

Differences from WebShop: the fuzzy ratio is difflib's (WebShop: python-Levenshtein through
thefuzz; both are 100 for equal strings and agree on clear matches), and the title words are
non-stopword tokens (WebShop: spaCy nouns), so no language model is needed. Tested on
hand-worked cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from arlgym.envs.webshop.catalog import Goal, Product

__all__ = ["token_set_ratio", "purchase_score", "ScoreBreakdown"]

_WORD = re.compile(r"[a-z0-9']+")
_STOPWORDS = frozenset(
    "a an and the for with of in on to by from at or is are be this that it its your you our "
    "set pack piece pcs count ounce oz inch x".split())


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio`` (0–100) with difflib's similarity as the base ratio."""
    ta, tb = set(_tokens(a)), set(_tokens(b))
    if not ta or not tb:
        return 0
    common = " ".join(sorted(ta & tb))
    only_a = (common + " " + " ".join(sorted(ta - tb))).strip()
    only_b = (common + " " + " ".join(sorted(tb - ta))).strip()

    def ratio(x: str, y: str) -> float:
        return SequenceMatcher(None, x, y).ratio() if x and y else 0.0

    best = max(ratio(common, only_a), ratio(common, only_b), ratio(only_a, only_b))
    return round(100 * best)


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    score: float
    r_type: float
    attribute_matches: int
    option_matches: int
    price_ok: bool
    title_score: float


def _type_reward(product: Product, goal: Goal) -> tuple[float, float]:
    query_match = product.query.strip().lower() == goal.query.strip().lower()
    levels = {x.strip().lower() for x in product.product_category.split("›")}
    wanted = {x.strip().lower() for x in goal.product_category.split("›")}
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
    text = " ".join([product.name, *product.bullets, product.description]).lower()
    matches = 0
    for wanted in goal.attributes:
        if any(token_set_ratio(have, wanted) > 85 for have in product.attributes) or wanted.lower() in text:
            matches += 1
    return matches


def _option_matches(chosen: list[str], goal: Goal) -> int:
    return sum(1 for wanted in goal.options.values()
               if any(token_set_ratio(have, wanted) > 85 for have in chosen))


def purchase_score(product: Product, chosen_options: dict[str, str], goal: Goal) -> ScoreBreakdown:
    """Score of buying ``product`` with ``chosen_options`` for ``goal`` (1.0: exactly right)."""
    r_type, title_score = _type_reward(product, goal)
    attrs = _attribute_matches(product, goal)
    opts = _option_matches(list(chosen_options.values()), goal)
    price_ok = product.price <= goal.price_upper
    total = (attrs + opts + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return ScoreBreakdown(round(total * r_type, 6), r_type, attrs, opts, price_ok, title_score)

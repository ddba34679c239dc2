"""The WebShop site as a state machine: search page → results (10 a page) → item page (options,
description / features / reviews tabs) → buy. One :class:`ShopSession` is one shopper; the
catalog and search index are shared (built once per catalog, not once per env).

Pages follow WebShop's text mode as verl-agent (ARLArena) runs it: the visible strings of the
page's HTML (``web_agent_site/templates``) joined by `` [SEP] ``, the instruction left out (the
prompt carries it):

* search: ``Search``
* results: ``Back to Search [SEP] Page 2 (Total results: 50) [SEP] < Prev [SEP] Next > [SEP] <asin>
  [SEP] <title> [SEP] $<price> …`` ("< Prev" from page 2 on; "Next >" on every page, the last and
  a zero-hit one included, as WebShop's template shows it);
* item: ``Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> … [SEP] <title> [SEP]
  Price: $15.0 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now``;
* description / features / reviews: ``Back to Search [SEP] < Prev`` then the description, each
  bullet point, or the reviews (none here).

Prices are written as WebShop writes them (Python's float text: ``$15.0``, ``$10.99``, ranges
``$10.0 to $20.0``). The admissible clickables are listed as WebShop's ``get_available_actions``
lists them: the page's buttons and product links in page order, then the option values.

Actions as WebShop's text env parses them (``re.match(r"(.+)\\[(.+)\\]", action)``, the name
case-sensitive, the argument lower-cased): ``search[q]`` with a non-empty ``q`` runs a new search
from any page (also on a results or item page); ``click[x]`` acts when ``x`` is a clickable of
the page other than ``search``; anything else — ``Search[q]``, `` search[q]``, ``click [buy
now]``, an element not on the page — changes nothing. Text after the closing bracket is ignored
(``search[q] please`` searches ``q``). WebShop's special searches are kept: ``search[<r>]`` (50
random products), ``<c> category``, ``<q> product type`` and ``<a> attribute`` (WebShop's own
``<a>`` crashes; here it lists the products with that attribute).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arlgym.envs.webshop.catalog import Goal, Product
from arlgym.envs.webshop.reward import ScoreBreakdown, purchase_score
from arlgym.envs.webshop.search import SEARCH_RETURN_N

__all__ = ["ShopSession", "Step", "RESULTS_PER_PAGE", "SEP", "parse_shop_action"]

RESULTS_PER_PAGE = 10
SEP = " [SEP] "
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
TABS = ("description", "features", "reviews")
_ACTION = re.compile(r"(.+)\[(.+)\]")  # WebShop's parse_action


def parse_shop_action(action: str) -> tuple[str, str] | None:
    """``"click[Buy Now]"`` → ``("click", "buy now")`` as WebShop parses it; ``None`` when the
    action is not a ``search[...]`` or ``click[...]`` WebShop would act on."""
    match = _ACTION.match(action)
    if not match or match.group(1) not in ("search", "click"):
        return None
    return match.group(1), match.group(2).lower()


@dataclass
class Step:
    """What one action did."""

    valid: bool
    done: bool = False
    score: ScoreBreakdown | None = None


@dataclass
class ShopSession:
    catalog: Any
    index: Any  # .search(query) -> asins
    goal: Goal
    page: str = "search"  # search | results | item | tab
    query: str = ""
    page_no: int = 1
    results: Sequence[str] = field(default_factory=list)
    asin: str | None = None
    chosen: dict[str, str] = field(default_factory=dict)
    tab: str | None = None
    purchased: str | None = None
    result: ScoreBreakdown | None = None  # the purchase's score, once bought

    # ------------------------------------------------------------------ view
    @property
    def product(self) -> Product | None:
        return self.catalog.by_asin.get(self.asin) if self.asin else None

    def page_results(self) -> list[str]:
        start = (self.page_no - 1) * RESULTS_PER_PAGE
        return self.results[start : start + RESULTS_PER_PAGE]

    def clickables(self) -> list[str]:
        """The page's clickables in WebShop's order: buttons and product links, then option values."""
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            return [BACK, *([PREV] if self.page_no > 1 else []), NEXT, *(a.lower() for a in self.page_results())]
        if self.page == "item":
            product = self.product
            assert product is not None
            values = [v for vs in product.options.values() for v in vs]
            return [BACK, PREV, *TABS, BUY, *dict.fromkeys(values)]
        return [BACK, PREV]

    def admissible(self) -> list[str]:
        search = ["search[<your query>]"] if self.page == "search" else []
        return search + [f"click[{c}]" for c in self.clickables()]

    def observation(self) -> str:
        if self.page == "search":
            return "Search"
        if self.page == "results":
            parts = ["Back to Search", f"Page {self.page_no} (Total results: {len(self.results)})"]
            parts += ["< Prev"] if self.page_no > 1 else []
            parts.append("Next >")
            for asin in self.page_results():
                p = self.catalog.by_asin[asin]
                parts += [asin, p.name, p.price_tag]
            return SEP.join(_visible(parts))
        product = self.product
        assert product is not None
        if self.page == "tab":
            body = {"description": [product.description], "features": list(product.bullets),
                    "reviews": []}[self.tab or "description"]
            return SEP.join(_visible(["Back to Search", "< Prev", *body]))
        parts = ["Back to Search", "< Prev"]
        for name, values in product.options.items():
            parts += [name, *values]
        parts += [product.name, f"Price: {product.price_tag}",
                  f"Rating: {product.rating if product.rating is not None else 'N.A.'}",
                  "Description", "Features", "Reviews", "Buy Now"]
        return SEP.join(_visible(parts))

    def _listing(self, query: str) -> _Asins | None:
        """WebShop's special searches: ``<r>`` 50 random products, ``<c> category``, ``<q> product
        type``, ``<a> attribute`` (every product with it; WebShop's own ``<a>`` crashes, its
        ``attribute_to_asins`` is never passed). ``None`` for an ordinary query."""
        keywords = query.split(" ")
        if keywords[0] not in ("<r>", "<c>", "<q>", "<a>") or not hasattr(self.catalog, "listing"):
            return None
        if keywords[0] == "<r>":  # WebShop draws with the global `random`; ours is seeded by the state
            n = len(self.catalog.products)
            rng = random.Random(f"{self.goal.instruction}|{query}")
            return _Asins(self.catalog, rng.sample(range(n), k=min(SEARCH_RETURN_N, n)))
        if keywords[0] == "<c>":
            field, value = "category", keywords[1].strip() if len(keywords) > 1 else ""
        else:
            field = "query" if keywords[0] == "<q>" else "attributes"
            value = " ".join(keywords[1:]).strip()
        return _Asins(self.catalog, self.catalog.listing(field, value))

    def state(self) -> tuple:
        """The true page state (for the GiGPO anchor)."""
        return (self.goal.instruction, self.page, self.query, self.page_no, self.asin,
                tuple(sorted(self.chosen.items())), self.tab, self.purchased)

    # ------------------------------------------------------------------ act
    def act(self, action: str) -> Step:
        parsed = parse_shop_action(action)
        if parsed is None:
            return Step(valid=False)
        verb, arg = parsed
        if verb == "search":  # from any page, as WebShop's text env does
            self.query = arg
            self.results = self._listing(arg) or self.index.search(arg)
            self.page, self.page_no, self.asin, self.chosen, self.tab = "results", 1, None, {}, None
            return Step(valid=True)
        clickables = self.clickables()
        if arg not in clickables:
            return Step(valid=False)
        if arg == "search":  # WebShop ignores a click on the search button (the box is empty)
            return Step(valid=True)
        if arg == BACK:
            self.page, self.query, self.results, self.asin, self.tab = "search", "", [], None, None
            self.page_no, self.chosen = 1, {}
        elif arg == NEXT:
            self.page_no += 1
        elif arg == PREV:
            if self.page == "results":
                self.page_no -= 1
            elif self.page == "item":
                self.page, self.asin, self.chosen = "results", None, {}
            else:
                self.page, self.tab = "item", None
        elif self.page == "results":
            self.asin = next(a for a in self.page_results() if a.lower() == arg)
            self.page, self.chosen = "item", {}
        elif arg in TABS:
            self.page, self.tab = "tab", arg
        elif arg == BUY:
            product = self.product
            assert product is not None
            self.purchased = product.asin
            self.result = purchase_score(product, self.chosen, self.goal)
            return Step(valid=True, done=True, score=self.result)
        else:  # an option value: WebShop's clickable is the last radio button with that value
            product = self.product
            assert product is not None
            name = [n for n, vs in product.options.items() if arg in vs][-1]
            self.chosen[name] = arg
        return Step(valid=True)


class _Asins(Sequence):
    """Asins of a listing, made from product numbers when read (a category can hold 200k)."""

    def __init__(self, catalog: Any, numbers: list[int]) -> None:
        self._catalog, self._numbers = catalog, numbers

    def __len__(self) -> int:
        return len(self._numbers)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._catalog.asin_of(n) for n in self._numbers[i]]
        return self._catalog.asin_of(self._numbers[i])

    def __bool__(self) -> bool:  # an empty listing is still an answer (no BM25 fallback)
        return True


def _visible(parts: list[str]) -> list[str]:
    """The page's text nodes as WebShop's text mode keeps them: stripped, empty ones dropped."""
    return [s for s in (p.strip() for p in parts) if s]

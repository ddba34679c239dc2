"""The WebShop site as a state machine: search page → results (10 a page) → item page (options,
description / features / reviews tabs) → buy. One :class:`ShopSession` is one shopper; the
catalog and search index are shared (built once per catalog, not once per env).

Text rendering follows WebShop's text mode: the visible strings of a page joined by ``[SEP]``
(the instruction is left out: the prompt carries it). Actions are WebShop's ``search[query]`` and
``click[element]``; the admissible list holds every clickable element of the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from arlgym.envs.webshop.catalog import Catalog, Goal, Product
from arlgym.envs.webshop.reward import ScoreBreakdown, purchase_score
from arlgym.envs.webshop.search import BM25Index

__all__ = ["ShopSession", "Step", "RESULTS_PER_PAGE", "SEP", "parse_shop_action"]

RESULTS_PER_PAGE = 10
SEP = " [SEP] "
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
TABS = ("description", "features", "reviews")
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


def parse_shop_action(action: str) -> tuple[str, str] | None:
    """``"click[Buy Now]"`` → ``("click", "buy now")``; ``None`` if not ``search[...]``/``click[...]``."""
    match = _ACTION.match(action)
    if not match:
        return None
    verb, arg = match.group(1).lower(), match.group(2).strip()
    return verb, (arg if verb == "search" else arg.lower())


@dataclass
class Step:
    """What one action did."""

    valid: bool
    done: bool = False
    score: ScoreBreakdown | None = None


@dataclass
class ShopSession:
    catalog: Catalog
    index: BM25Index
    goal: Goal
    page: str = "search"  # search | results | item | tab
    query: str = ""
    page_no: int = 1
    results: list[str] = field(default_factory=list)
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
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            out = [BACK]
            if self.page_no > 1:
                out.append(PREV)
            if self.page_no * RESULTS_PER_PAGE < len(self.results):
                out.append(NEXT)
            return out + [a.lower() for a in self.page_results()]
        if self.page == "item":
            product = self.product
            assert product is not None
            values = [v for vs in product.options.values() for v in vs]
            return [BACK, PREV, *dict.fromkeys(values), *TABS, BUY]  # page order
        return [BACK, PREV]

    def admissible(self) -> list[str]:
        search = ["search[<your query>]"] if self.page == "search" else []
        return search + [f"click[{c}]" for c in self.clickables()]

    def observation(self) -> str:
        if self.page == "search":
            return "Search"
        if self.page == "results":
            parts = [BACK.title(), f"Page {self.page_no} (Total results: {len(self.results)})"]
            parts += [PREV.title()] if self.page_no > 1 else []
            parts += ["Next >"] if self.page_no * RESULTS_PER_PAGE < len(self.results) else []
            for asin in self.page_results():
                p = self.catalog.by_asin[asin]
                parts += [asin, p.name, f"${p.price:.2f}"]
            if not self.results:
                parts.append("No products match your query.")
            return SEP.join(parts)
        product = self.product
        assert product is not None
        if self.page == "tab":
            body = {"description": product.description,
                    "features": SEP.join(product.bullets) or "No features listed.",
                    "reviews": "No reviews yet."}[self.tab or "description"]
            return SEP.join([BACK.title(), PREV.title(), body])
        parts = [BACK.title(), PREV.title()]
        for name, values in product.options.items():
            parts += [name, *values]
        parts += [product.name, f"Price: ${product.price:.2f}",
                  f"Rating: {product.rating if product.rating is not None else 'N.A.'}",
                  "Description", "Features", "Reviews", "Buy Now"]
        if self.chosen:
            parts.append("Selected: " + ", ".join(f"{k}: {v}" for k, v in self.chosen.items()))
        return SEP.join(parts)

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
        if verb == "search":
            if self.page != "search" or not arg or arg == "<your query>":
                return Step(valid=False)
            self.query = arg.lower()
            self.results = self.index.search(self.query)
            self.page, self.page_no = "results", 1
            return Step(valid=True)
        if arg not in self.clickables():
            return Step(valid=False)
        if arg == "search":  # the search button with an empty box: nothing happens
            return Step(valid=True)
        if arg == BACK:
            self.page, self.query, self.results, self.asin, self.tab = "search", "", [], None, None
            self.chosen = {}
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
        else:  # an option value: select it under its option name
            product = self.product
            assert product is not None
            name = next(n for n, vs in product.options.items() if arg in vs)
            self.chosen[name] = arg
        return Step(valid=True)

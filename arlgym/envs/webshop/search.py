"""BM25 product search (WebShop uses a pyserini/Lucene BM25 index that needs Java 21).

Documents are what WebShop indexes: the lower-cased title, description, bullets and option
values. An inverted index in plain Python: building 1,000 products takes a few ms, a query well
under a millisecond, and nothing outside the standard library is needed.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

from arlgym.envs.webshop.catalog import Product

__all__ = ["BM25Index", "SEARCH_RETURN_N"]

#: results a search returns (WebShop's SEARCH_RETURN_N); shown 10 per page
SEARCH_RETURN_N = 50
_WORD = re.compile(r"[a-z0-9]+")


def _terms(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def product_document(product: Product) -> str:
    values = " ".join(v for vs in product.options.values() for v in vs)
    return " ".join([product.name, product.description, *product.bullets, values]).lower()


class BM25Index:
    """Okapi BM25 (k1=0.9, b=0.4: Lucene/pyserini's defaults) over ``products``."""

    def __init__(self, products: list[Product], k1: float = 0.9, b: float = 0.4) -> None:
        self.asins = [p.asin for p in products]
        self.k1, self.b = k1, b
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self._lengths = []
        for i, product in enumerate(products):
            counts = Counter(_terms(product_document(product)))
            self._lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings[term].append((i, tf))
        n = len(products)
        self._avg = sum(self._lengths) / max(1, n)
        self._idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()}

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The ``k`` best asins for ``query`` (ties: catalog order); empty for no known word."""
        scores: dict[int, float] = defaultdict(float)
        for term in _terms(query):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for doc, tf in self._postings[term]:
                norm = self.k1 * (1 - self.b + self.b * self._lengths[doc] / self._avg)
                scores[doc] += idf * tf * (self.k1 + 1) / (tf + norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
        return [self.asins[doc] for doc, _ in best]

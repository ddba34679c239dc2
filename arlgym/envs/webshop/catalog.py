"""WebShop products and goals: a seeded synthetic catalog (offline default, any size up to
WebShop's full 1.18M products) and WebShop's own product / instruction files.

A product has WebShop's fields: ``asin``, ``name`` (title), ``category`` (one of WebShop's five),
``query`` (the product type it was scraped for), ``product_category`` (a ``›`` path), ``price``
(and ``price_tag``, the text the pages show), ``attributes`` (the product's attribute list the
score matches against), ``options`` (name → values, e.g. size and color), ``description`` and
``bullets``. A goal asks for one product type with some attributes, option values and a price
bound, worded as WebShop's synthetic instructions are ("i need a … , and price lower than 40.00
dollars"); the product it was made from scores 1.

**Synthetic** (:class:`SyntheticCatalog`): titles carry a model code unique in the catalog
("Acme Hoodie BX-4821 - Slim Fit"), so a title search finds its product at any size. Generated
in fixed chunks of 65,536 products, each from its own seed, as numpy arrays of choices (about 30
bytes a product: 35 MB at 1.18M, cached on disk from 50k products on); a product's text and its
goals are made from those arrays only when asked for, and the search index's postings are
computed from them without making any text (:meth:`postings`).

**Official** files are read into an on-disk SQLite store once (:class:`OfficialCatalog`), so
memory stays bounded at WebShop's full size.

**Official** (:func:`load_official_catalog`): ``items_shuffle*.json`` (streamed, one product at a
time) with ``items_ins_v2*.json`` and optionally ``items_human_ins.json``, read with WebShop's
conventions (``web_agent_site/engine/engine.py::load_products``): option values with "/"
written " | ", a price range "$a - $b" shown as "$a to $b" and priced at a draw within it, no
price → $100.0, the product's full attribute list (``items_ins_v2``'s ``attributes``, else
``DUMMY_ATTR``) for scoring, asins ``nan`` or longer than 10 skipped. Goals are WebShop's:
``goal_source="synthetic"`` (every option combination of every product with an instruction,
``get_synthetic_goals``) or ``"human"`` (the crowd-written instructions, ``get_human_goals``),
price bounds drawn from 10 … 990 in steps of 10, shuffled as WebShop shuffles them
(``random.seed(233); random.shuffle``), so goal i is WebShop's goal i.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from arlgym.core.validation import check_int
from arlgym.envs.webshop.search import cache_root
from arlgym.errors import ConfigError, LevelFormatError

__all__ = ["Product", "Goal", "Catalog", "SyntheticCatalog", "OfficialCatalog", "generate_catalog",
           "load_official_catalog", "goals_for", "price_bound", "PRICE_RANGE", "MAX_PRODUCTS"]

#: WebShop's price bounds (``goal.py::PRICE_RANGE``): 10, 20, …, 990
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_BOUND = 1_000_000.0
#: the largest synthetic catalog (WebShop's full product file has 1,181,436)
MAX_PRODUCTS = 2_000_000


@dataclass(frozen=True)
class Product:
    asin: str
    name: str
    category: str
    query: str
    product_category: str
    price: float
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    description: str = ""
    bullets: tuple[str, ...] = ()
    rating: float | None = None
    instruction: str | None = None  # the attribute-bearing request this product answers
    price_text: str | None = None   # what the pages show; None: "$<price>"

    @property
    def price_tag(self) -> str:
        """The price as WebShop's pages show it: ``$15.0``, ``$10.99``, ``$10.0 to $20.0``."""
        return self.price_text if self.price_text is not None else f"${self.price}"


@dataclass(frozen=True)
class Goal:
    asin: str
    instruction: str
    attributes: tuple[str, ...]
    #: name → value (synthetic goals), or bare values (human goals' ``instruction_options``)
    options: dict[str, str] | tuple[str, ...]
    price_upper: float
    query: str
    name: str
    product_category: str
    category: str

    @property
    def option_values(self) -> list[str]:
        return list(self.options.values()) if isinstance(self.options, dict) else list(self.options)


class Catalog:
    """Products and goals held in memory (small catalogs, official files, tests)."""

    def __init__(self, products: Sequence[Product], goals: Sequence[Goal], fingerprint: str | None = None) -> None:
        self.products = products
        self.goals = goals
        self.by_asin: Mapping[str, Product] = {p.asin: p for p in products}
        self._asins = [p.asin for p in products]
        self.fingerprint = fingerprint or _digest(
            json.dumps([[p.asin, p.name, p.description, list(p.bullets), p.options] for p in products]))

    def asin_of(self, i: int) -> str:
        return self._asins[i]

    def asins_of(self, numbers: Iterable[int]) -> list[str]:
        return [self._asins[int(i)] for i in numbers]

    def iter_products(self) -> Iterator[Product]:
        return iter(self.products)

    def listing(self, field: str, value: str) -> list[int]:
        """Numbers of the products whose ``field`` (``category``, ``query`` or an entry of
        ``attributes``) equals ``value`` — WebShop's ``<c>``, ``<q>``, ``<a>`` searches."""
        return _scan_listing(self.iter_products(), field, value)


def _scan_listing(products: Iterator[Product], field: str, value: str) -> list[int]:
    if field == "attributes":
        return [i for i, p in enumerate(products) if value in p.attributes]
    return [i for i, p in enumerate(products) if getattr(p, field) == value]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# ----------------------------------------------------------------------------- goals
def price_bound(price: float, rng: random.Random | np.random.Generator) -> float:
    """WebShop's bound for a product at ``price``: the larger of two distinct draws from the
    first four of 10 … 990 above the price; ``NO_BOUND`` when fewer than two are above."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_BOUND
    if isinstance(rng, random.Random):
        return float(sorted(rng.sample(above, 2))[1])
    return float(sorted(rng.choice(above, size=2, replace=False))[1])


def _price_text(bound: float) -> str:
    return f", and price lower than {bound:.2f} dollars" if bound < NO_BOUND else ""


def goals_for(product: Product, rng: random.Random | np.random.Generator,
              attributes: Sequence[str] | None = None) -> list[Goal]:
    """WebShop's synthetic goals of one product: one per option combination (option names
    sorted), all with one price bound (:func:`price_bound`)."""
    attributes = tuple(product.attributes if attributes is None else attributes)
    if not product.instruction or not attributes:
        return []
    bound = price_bound(product.price, rng)
    names = sorted(product.options)
    goals = []
    for combo in itertools.product(*(product.options[n] for n in names)):
        chosen = dict(zip(names, combo, strict=True))
        option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
        goals.append(Goal(asin=product.asin,
                          instruction=product.instruction + (f" with {option_text}" if option_text else "") + _price_text(bound),
                          attributes=attributes, options=chosen, price_upper=bound, query=product.query,
                          name=product.name, product_category=product.product_category,
                          category=product.category))
    return goals


# ----------------------------------------------------------------------------- synthetic
# Per category: product types, the attributes instructions ask for, and the options a product
# may have. Enough variety that search must read the instruction. ("classic", not "standard":
# WebShop's option score shrinks a chosen value to a colour word it contains, "standard" -> "tan",
# which would make such goals unwinnable.)
_CATEGORIES: dict[str, dict[str, Any]] = {
    "fashion": {
        "path": "Clothing, Shoes & Jewelry",
        "types": ["men's t-shirt", "women's dress", "running shoes", "hoodie", "yoga pants",
                  "rain jacket", "wool socks", "denim jeans"],
        "attributes": ["machine washable", "short sleeve", "long sleeve", "slim fit", "cotton",
                       "quick drying", "button closure", "relaxed fit", "moisture wicking",
                       "non slip", "elastic waist", "water resistant"],
        "options": {"size": ["small", "medium", "large", "x-large", "xx-large"],
                    "color": ["black", "navy blue", "heather grey", "white", "red", "olive green"]},
    },
    "beauty": {
        "path": "Beauty & Personal Care",
        "types": ["face moisturizer", "shampoo", "lip balm", "deodorant", "sunscreen",
                  "hair oil", "body wash", "nail polish"],
        "attributes": ["cruelty free", "paraben free", "long lasting", "natural ingredients",
                       "travel size", "sensitive skin", "fragrance free", "vegan",
                       "dermatologist tested", "oil free", "alcohol free", "easy to use"],
        "options": {"size": ["1 fl oz", "3.4 fl oz", "8 fl oz", "pack of 2", "pack of 3"],
                    "scent": ["lavender", "unscented", "citrus", "coconut", "mint"]},
    },
    "food": {
        "path": "Grocery & Gourmet Food",
        "types": ["protein bars", "green tea", "trail mix", "dark chocolate", "coffee beans",
                  "beef jerky", "olive oil", "granola"],
        "attributes": ["gluten free", "non gmo", "sugar free", "keto friendly", "low carb",
                       "plant based", "high protein", "usda organic", "kosher certified",
                       "individually wrapped", "low sodium", "dairy free"],
        "options": {"flavor": ["original", "vanilla", "chocolate", "honey", "sea salt",
                               "peanut butter"],
                    "size": ["12 ounce", "1 pound", "pack of 6", "pack of 12", "2 pound"]},
    },
    "electronics": {
        "path": "Electronics",
        "types": ["bluetooth speaker", "wireless earbuds", "phone charger", "hdmi cable",
                  "usb hub", "webcam", "smart watch", "power bank"],
        "attributes": ["fast charging", "noise cancelling", "high definition", "water resistant",
                       "usb type c", "long battery life", "easy install", "plug and play",
                       "wireless charging", "heavy duty", "high speed", "lightweight"],
        "options": {"color": ["black", "white", "silver", "blue", "rose gold"],
                    "style": ["classic", "pro", "2 pack", "with case", "mini"]},
    },
    "furniture": {
        "path": "Home & Kitchen",
        "types": ["office chair", "bookshelf", "coffee table", "bed frame", "shoe rack",
                  "floor lamp", "bar stool", "tv stand"],
        "attributes": ["easy assemble", "solid wood", "space saving", "living room",
                       "storage space", "mid century", "metal frame", "height adjustable",
                       "easy clean", "non slip", "heavy duty", "living room furniture"],
        "options": {"color": ["walnut", "black", "white", "grey", "natural oak", "espresso"],
                    "size": ["small", "medium", "large", "2 tier", "4 tier"]},
    },
}
_CATS = list(_CATEGORIES)
_BRANDS = ["acme", "northwind", "bluepeak", "everly", "solace", "kinetic", "harbor", "maple & co",
           "zenith", "lumen", "orchard", "vantage", "copperline", "driftwood", "nimbus", "terra"]
_PREFIXES = ("i need", "i am looking for", "i want", "find me", "i'm looking for", "get me")
_CHUNK = 65_536
_GENERATOR_VERSION = "synthetic-3"
# asins: "B0" + 8 base-36 digits of a bijection of the product number (no table needed either way)
_ASIN_M = 36 ** 8
_ASIN_A = 25_214_903_917  # odd and not a multiple of 3: invertible mod 36^8
_ASIN_A_INV = pow(_ASIN_A, -1, _ASIN_M)
_B36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_B36_CODES = np.frombuffer(_B36.encode(), dtype=np.uint8)
# model codes "BX-4821": two consonants (no stop-word is one) and four digits, a bijection of the
# product number, so every synthetic title is unique (as Amazon titles with model numbers are)
_MODEL_LETTERS = "BCDFGHJKLMNPQRSTVWXZ"
_MODEL_M = 400 * 10_000
_MODEL_A = 2_654_435_761  # odd, not a multiple of 5: invertible mod 4,000,000


def _option_names(cat: str) -> list[str]:
    return list(_CATEGORIES[cat]["options"])


class _LazySeq(Sequence):
    def __init__(self, n: int, get: Any) -> None:
        self._n, self._get = n, get

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._get(i)


class _AsinMap(Mapping):
    """A catalog's ``by_asin``: a read-only dict view that builds each product on demand from
    the catalog's ``index_of`` / ``asin_of`` / ``product`` (the generated and the official
    catalog alike), so no catalog holds a dict of every product."""

    def __init__(self, catalog: SyntheticCatalog | OfficialCatalog) -> None:
        self._cat = catalog

    def __getitem__(self, asin: str) -> Product:
        i = self._cat.index_of(asin)
        if i is None:
            raise KeyError(asin)
        return self._cat.product(i)

    def __iter__(self) -> Iterator[str]:
        return (self._cat.asin_of(i) for i in range(len(self._cat.products)))

    def __len__(self) -> int:
        return len(self._cat.products)

    def __contains__(self, asin: object) -> bool:
        return isinstance(asin, str) and self._cat.index_of(asin) is not None


class SyntheticCatalog:
    """``num_products`` generated products and up to ``goals_per_product`` goals each; see the
    module docstring. ``products``, ``goals`` and ``by_asin`` behave as a list, a list and a dict."""

    def __init__(self, num_products: int = 1000, seed: int = 0, goals_per_product: int = 2) -> None:
        self.num_products, self.seed, self.goals_per_product = num_products, seed, goals_per_product
        self.fingerprint = _digest(f"{_GENERATOR_VERSION}:{num_products}:{seed}:{goals_per_product}")
        self._asin_b = (seed * 0x9E3779B97F4A7C15 + 0x2545F491) % _ASIN_M
        self._model_b = (seed * 0x2545F4914F6CDD1D + 7) % _MODEL_M
        self._ncat = np.array([[len(_CATEGORIES[c]["options"][n]) for n in _option_names(c)] for c in _CATS])
        a = self._cached_arrays()
        self._kind, self._brand, self._prefix = a["kind"], a["brand"], a["prefix"]
        self._nattr, self._attrs, self._shown = a["nattr"], a["attrs"], a["shown"]
        self._nval, self._vals, self._cents = a["nval"], a["vals"], a["cents"]
        self._g_prod, self._g_combo, self._bound = a["g_prod"], a["g_combo"], a["bound"]
        self.product = lru_cache(maxsize=8192)(self.product)  # type: ignore[method-assign]
        self.products: Sequence[Product] = _LazySeq(num_products, self.product)
        self.goals: Sequence[Goal] = _LazySeq(len(self._g_prod), self.goal)
        self.by_asin: Mapping[str, Product] = _AsinMap(self)

    def _cached_arrays(self) -> dict[str, np.ndarray]:
        """The choice arrays: generated, or read from the disk cache for large catalogs (a
        worker process starts without regenerating 1.18M products)."""
        path = cache_root() / "webshop" / f"{self.fingerprint}-catalog.npz"
        if self.num_products >= 50_000 and path.is_file():
            try:
                with np.load(path) as z:
                    return {k: z[k] for k in z.files}
            except (OSError, ValueError, KeyError):
                pass  # damaged: regenerate
        arrays = self._generate()
        if self.num_products >= 50_000:
            try:
                import os
                import tempfile

                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".npz", dir=path.parent)
                with os.fdopen(fd, "wb") as f:
                    np.savez(f, **arrays)
                os.replace(tmp, path)
            except OSError:
                pass  # read-only cache: still works, only not cached
        return arrays

    def _generate(self) -> dict[str, np.ndarray]:
        n = self.num_products
        parts = [self._chunk(c, s, min(_CHUNK, n - s)) for c, s in enumerate(range(0, n, _CHUNK))]
        a = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        # goals in product order, then shuffled with a fixed seed (the same order everywhere)
        per = a["ngoal"].astype(np.int64)
        g_prod = np.repeat(np.arange(n, dtype=np.int64), per)
        first = np.repeat(np.cumsum(per) - per, per)
        slot = np.arange(len(g_prod)) - first
        g_combo = np.where(slot == 0, a["combo0"][g_prod], a["combo1"][g_prod])
        order = np.random.default_rng(233).permutation(len(g_prod))  # WebShop shuffles with seed 233
        keep = ("kind", "brand", "prefix", "nattr", "attrs", "shown", "nval", "vals", "cents", "bound")
        return {**{k: a[k] for k in keep}, "g_prod": g_prod[order].astype(np.int32),
                "g_combo": g_combo[order].astype(np.int16)}

    def model_of(self, i: int) -> tuple[str, str]:
        """Product i's model code, e.g. ("BX", "4821"): unique in the catalog, so its title finds it."""
        m = (int(i) * _MODEL_A + self._model_b) % _MODEL_M
        letters, digits = divmod(m, 10_000)
        return _MODEL_LETTERS[letters // 20] + _MODEL_LETTERS[letters % 20], f"{digits:04d}"

    # ------------------------------------------------------------------ generation
    def _chunk(self, c: int, start: int, n: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, c, 0xC47A])
        cat = (start + np.arange(n)) % len(_CATS)
        out: dict[str, np.ndarray] = {
            "kind": rng.integers(0, 8, n).astype(np.int8),
            "brand": rng.integers(0, len(_BRANDS), n).astype(np.int8),
            "prefix": rng.integers(0, len(_PREFIXES), n).astype(np.int8),
            "nattr": rng.integers(2, 4, n).astype(np.int8),
        }
        out["attrs"] = np.argsort(rng.random((n, 12), dtype=np.float32), axis=1)[:, :3].astype(np.int8)
        out["shown"] = (1 + np.floor(rng.random(n) * out["nattr"])).astype(np.int8)
        nval = np.zeros((n, 2), dtype=np.int8)
        vals = np.full((n, 2, 5), -1, dtype=np.int8)
        for s in range(2):
            size = self._ncat[cat, s]
            present = rng.random(n) < 0.85
            k = 2 + np.floor(rng.random(n) * (np.minimum(5, size) - 1)).astype(np.int64)
            keys = rng.random((n, 6), dtype=np.float32)
            keys[np.arange(6)[None, :] >= size[:, None]] = 2.0  # values the category lacks sort last
            order = np.argsort(keys, axis=1)[:, :5]
            order[np.arange(5)[None, :] >= k[:, None]] = -1
            vals[:, s] = np.where(present[:, None], order, -1)
            nval[:, s] = np.where(present, k, 0)
        out["nval"], out["vals"] = nval, vals
        furniture = cat == _CATS.index("furniture")
        u = rng.random(n)
        price = np.where(furniture, 30 + u * 370, 5 + u * 145)
        out["cents"] = np.round(price * 100).astype(np.int32)
        rng.random(n)  # (was a made-up rating; WebShop shows "Rating: N.A." without its reviews file)
        # goals: up to goals_per_product distinct option combinations (all when there are fewer)
        combos = np.maximum(nval[:, 0], 1).astype(np.int64) * np.maximum(nval[:, 1], 1)
        gpp = self.goals_per_product
        r1, r2 = rng.random(n), rng.random(n)
        x = np.floor(r1 * combos).astype(np.int64)
        y = np.floor(r2 * np.maximum(combos - 1, 1)).astype(np.int64)
        y = y + (y >= x)
        lo, hi = np.minimum(x, y), np.maximum(x, y)
        few = combos <= gpp
        out["ngoal"] = np.minimum(combos, gpp).astype(np.int8) if gpp >= 1 else np.zeros(n, np.int8)
        out["combo0"] = np.where(few, 0, lo if gpp >= 2 else x)
        out["combo1"] = np.where(few, 1, hi)
        # WebShop's price bound: larger of two distinct draws among the first 4 multiples of 10 above
        m0 = out["cents"] // 1000 + 1
        count = np.clip(100 - m0, 0, 4)
        r3, r4 = rng.random(n), rng.random(n)
        a = np.floor(r3 * count).astype(np.int64)
        b = np.floor(r4 * np.maximum(count - 1, 1)).astype(np.int64)
        b = b + (b >= a)
        out["bound"] = np.where(count >= 2, 10.0 * (m0 + np.maximum(a, b)), NO_BOUND)
        return out

    # ------------------------------------------------------------------ asins
    def asin_of(self, i: int) -> str:
        x = (int(i) * _ASIN_A + self._asin_b) % _ASIN_M
        digits = []
        for _ in range(8):
            x, r = divmod(x, 36)
            digits.append(_B36[r])
        return "B0" + "".join(reversed(digits))

    def asins_of(self, numbers: np.ndarray) -> list[str]:
        """:meth:`asin_of` of many products at once (vectorised: a search's 50 results)."""
        x = (np.asarray(numbers, dtype=np.int64) * _ASIN_A + self._asin_b) % _ASIN_M
        codes = np.empty((len(x), 10), dtype=np.uint8)
        codes[:, 0], codes[:, 1] = ord("B"), ord("0")
        for k in range(9, 1, -1):
            x, r = np.divmod(x, 36)
            codes[:, k] = _B36_CODES[r]
        return [c.decode() for c in codes.view("S10").ravel()]

    def index_of(self, asin: str) -> int | None:
        asin = asin.upper()
        if len(asin) != 10 or not asin.startswith("B0") or any(ch not in _B36 for ch in asin[2:]):
            return None
        x = int(asin[2:], 36)
        i = ((x - self._asin_b) * _ASIN_A_INV) % _ASIN_M
        return i if i < self.num_products else None

    # ------------------------------------------------------------------ products and goals
    def _values(self, i: int) -> dict[str, tuple[str, ...]]:
        cat = _CATS[i % len(_CATS)]
        options = {}
        for s, name in enumerate(_option_names(cat)):
            k = int(self._nval[i, s])
            if k:
                table = _CATEGORIES[cat]["options"][name]
                options[name] = tuple(table[int(v)] for v in self._vals[i, s, :k])
        return options

    def product(self, i: int) -> Product:
        cat = _CATS[i % len(_CATS)]
        spec = _CATEGORIES[cat]
        kind = spec["types"][int(self._kind[i])]
        attrs = tuple(spec["attributes"][int(a)] for a in self._attrs[i, : int(self._nattr[i])])
        brand = _BRANDS[int(self._brand[i])]
        shown = attrs[: int(self._shown[i])]
        letters, digits = self.model_of(i)
        name = f"{brand.title()} {kind.title()} {letters}-{digits} - " + ", ".join(a.title() for a in shown)
        description = (f"This {kind} from {brand.title()} is {', '.join(attrs[:-1])} and {attrs[-1]}. "
                       f"A reliable choice in {spec['path'].lower()}.")
        bullets = tuple(f"{a.capitalize()}: designed to be {a} for everyday use." for a in attrs)
        instruction = (f"{_PREFIXES[int(self._prefix[i])]} {'a ' if not kind.endswith('s') else ''}{kind} "
                       f"that is {' and '.join(attrs)}")
        return Product(asin=self.asin_of(i), name=name, category=cat, query=kind,
                       product_category=f"{spec['path']} › {cat.title()} › {kind.title()}",
                       price=int(self._cents[i]) / 100, attributes=attrs, options=self._values(i),
                       description=description, bullets=bullets, rating=None, instruction=instruction)

    def goal(self, j: int) -> Goal:
        i, combo = int(self._g_prod[j]), int(self._g_combo[j])
        p = self.product(i)
        names = sorted(p.options)
        chosen: dict[str, str] = {}
        for name in reversed(names):  # mixed radix, the last name varying fastest
            values = p.options[name]
            combo, r = divmod(combo, len(values))
            chosen[name] = values[r]
        chosen = {n: chosen[n] for n in names}
        bound = float(self._bound[i])
        option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
        return Goal(asin=p.asin, instruction=p.instruction + (f" with {option_text}" if option_text else "")
                    + _price_text(bound), attributes=p.attributes, options=chosen, price_upper=bound,
                    query=p.query, name=p.name, product_category=p.product_category, category=p.category)

    def iter_products(self) -> Iterator[Product]:
        for i in range(self.num_products):
            yield self.product.__wrapped__(i)  # type: ignore[attr-defined]  # no cache churn

    def listing(self, field: str, value: str) -> list[int]:
        """See :meth:`Catalog.listing`; computed on the choice arrays."""
        idx = np.arange(self.num_products)
        cat = idx % len(_CATS)
        hit = np.zeros(self.num_products, dtype=bool)
        for ci, c in enumerate(_CATS):
            spec = _CATEGORIES[c]
            if field == "category" and value == c:
                hit |= cat == ci
            elif field == "query" and value in spec["types"]:
                hit |= (cat == ci) & (self._kind == spec["types"].index(value))
            elif field == "attributes" and value in spec["attributes"]:
                a = spec["attributes"].index(value)
                has = (self._attrs == a) & (np.arange(3)[None, :] < self._nattr[:, None])
                hit |= (cat == ci) & has.any(axis=1)
        return np.flatnonzero(hit).tolist()

    # ------------------------------------------------------------------ search postings
    def postings(self, analyzer: Any, vocab: dict[str, int]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(doc, term, tf)`` of each chunk's products, computed from the choice arrays: a
        product's document (:func:`~arlgym.envs.webshop.search.product_document`) is a sum of
        pieces (brand, type, attributes, options, fixed words) whose terms are counted once."""
        pieces: list[str] = []

        def ids(strings: list[str]) -> np.ndarray:
            start = len(pieces)
            pieces.extend(strings)
            return np.arange(start, len(pieces))

        brand = ids(_BRANDS)
        kind = np.stack([ids(_CATEGORIES[c]["types"]) for c in _CATS])
        attr = np.stack([ids(_CATEGORIES[c]["attributes"]) for c in _CATS])
        path = ids([_CATEGORIES[c]["path"] for c in _CATS])
        opt_name = np.stack([ids(_option_names(c)) for c in _CATS])
        value = np.full((len(_CATS), 2, 6), -1)
        for ci, c in enumerate(_CATS):
            for s, n in enumerate(_option_names(c)):
                v = ids(_CATEGORIES[c]["options"][n])
                value[ci, s, : len(v)] = v
        fixed_desc, fixed_bullet = ids(["this from is and a reliable choice in",
                                        "designed to be for everyday use"])
        model_letters = ids([a + b for a in _MODEL_LETTERS for b in _MODEL_LETTERS])
        model_digits = ids([f"{d:04d}" for d in range(10_000)])
        term_lists = []
        for text in pieces:  # (a run of digits is its own term: no need to analyse 10,000 of them)
            terms = [text] if text.isdigit() else analyzer.terms(text)
            term_lists.append([vocab.setdefault(t, len(vocab)) for t in terms])
        plen = np.array([len(t) for t in term_lists])
        pptr = np.concatenate(([0], np.cumsum(plen)))
        pterms = np.array([t for ts in term_lists for t in ts], dtype=np.int64)
        n_terms = len(vocab)
        step = 16_384  # documents a round: bounds the expansion's scratch arrays (~40 MB)
        for start in range(0, self.num_products, step):
            stop = min(self.num_products, start + step)
            n = stop - start
            idx = np.arange(start, stop)
            cat = idx % len(_CATS)
            local = np.arange(n)
            rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

            def add(docs: np.ndarray, piece: np.ndarray, mult: Any, rows: list = rows) -> None:
                rows.append((docs, piece, np.broadcast_to(np.asarray(mult, dtype=np.int64), docs.shape)))

            add(local, brand[self._brand[idx]], 2)                 # title + description
            add(local, kind[cat, self._kind[idx]], 2)              # title + description
            add(local, path[cat], 1)
            add(local, np.full(n, fixed_desc), 1)
            add(local, np.full(n, fixed_bullet), 1)                # the first bullet's fixed words
            m = (idx.astype(np.int64) * _MODEL_A + self._model_b) % _MODEL_M  # the title's model code
            add(local, model_letters[m // 10_000], 1)
            add(local, model_digits[m % 10_000], 1)
            nattr, shown = self._nattr[idx], self._shown[idx]
            for j in range(3):
                has = j < nattr
                mult = 1 + (j < shown) + (2 if j == 0 else 0)        # description, title, first bullet x2
                d = local[has]
                add(d, attr[cat[has], self._attrs[idx[has], j]], np.asarray(mult)[has] if np.ndim(mult) else mult)
            for s in range(2):
                present = self._nval[idx, s] > 0
                add(local[present], opt_name[cat[present], s], 1)
                for v in range(5):
                    vi = self._vals[idx, s, v]
                    has = vi >= 0
                    add(local[has], value[cat[has], s, vi[has]], 1)
            docs = np.concatenate([r[0] for r in rows])
            piece = np.concatenate([r[1] for r in rows])
            mult = np.concatenate([r[2] for r in rows])
            lens = plen[piece]
            doc_rep = np.repeat(docs, lens)
            mult_rep = np.repeat(mult, lens)
            offsets = np.repeat(pptr[piece] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
            term = pterms[offsets]
            key, inverse = np.unique(doc_rep * n_terms + term, return_inverse=True)
            tf = np.bincount(inverse, weights=mult_rep).astype(np.int64)
            yield key // n_terms + start, key % n_terms, tf


def generate_catalog(num_products: int = 1000, seed: int = 0, goals_per_product: int = 2) -> SyntheticCatalog:
    """A synthetic catalog (see :class:`SyntheticCatalog`); the same object for the same
    arguments within a process."""
    return _synthetic(check_int("num_products", num_products, min=5, max=MAX_PRODUCTS, example=1000),
                      check_int("catalog_seed", seed, min=0, max=2**63 - 1, example=0),
                      check_int("goals_per_product", goals_per_product, min=1, max=2, example=2))


@lru_cache(maxsize=4)
def _synthetic(num_products: int, seed: int, goals_per_product: int) -> SyntheticCatalog:
    return SyntheticCatalog(num_products, seed, goals_per_product)


# ----------------------------------------------------------------------------- official data
def _webshop_price(pricing: Any) -> tuple[list[float], str]:
    """WebShop's ``load_products`` pricing: the numbers after each "$" (at most two) and the tag."""
    if not pricing:
        return [100.0], "$100.0"
    try:
        prices = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(pricing).split("$")[1:]]
    except InvalidOperation:
        prices = []
    if not prices:  # WebShop raises here; a product with an unreadable price gets the default
        return [100.0], "$100.0"
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


class _JsonStream:
    """Reads JSON values one at a time from a file (a 5 GB file never sits in memory)."""

    _WS = " \t\r\n"

    def __init__(self, f: Any, buffer: int) -> None:
        self.f, self.buffer = f, buffer
        self.text, self.pos, self.eof = f.read(buffer), 0, False
        self.decoder = json.JSONDecoder()

    def more(self) -> bool:
        chunk = self.f.read(self.buffer)
        if not chunk:
            self.eof = True
            return False
        self.text, self.pos = self.text[self.pos:] + chunk, 0
        return True

    def peek(self, skip: str = _WS) -> str:
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in skip:
                self.pos += 1
            if self.pos < len(self.text) or not self.more():
                return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str, what: str) -> None:
        if self.peek() != ch:
            raise json.JSONDecodeError(f"expected {what}", self.text, self.pos)
        self.pos += 1

    def value(self) -> Any:
        while True:
            try:
                item, end = self.decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                if self.eof or not self.more():
                    raise
                continue
            if end == len(self.text) and not self.eof and self.more():  # a number may go on
                continue
            self.pos = end
            return item


def iter_json_array(path: Path, buffer: int = 1 << 20) -> Iterator[Any]:
    """The items of a JSON array file, parsed one at a time."""
    with open(path, encoding="utf-8") as f:
        js = _JsonStream(f, buffer)
        js.expect("[", "a JSON array")
        while True:
            ch = js.peek(" \t\r\n,")
            if ch == "]":
                return
            if ch == "":
                raise json.JSONDecodeError("unterminated JSON array", js.text, js.pos)
            yield js.value()


def iter_json_object(path: Path, buffer: int = 1 << 20) -> Iterator[tuple[str, Any]]:
    """The (key, value) pairs of a JSON object file, parsed one at a time."""
    with open(path, encoding="utf-8") as f:
        js = _JsonStream(f, buffer)
        js.expect("{", "a JSON object")
        while True:
            ch = js.peek(" \t\r\n,")
            if ch == "}":
                return
            if ch != '"':
                raise json.JSONDecodeError("expected a key or '}'", js.text, js.pos)
            key = js.value()
            js.expect(":", "':'")
            js.peek()
            yield key, js.value()


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LevelFormatError(f"WebShop {what} file {str(path)!r} is not valid JSON: {e}") from e


def _official_product(item: Any, path: Path, n: int, ins: Mapping[str, Any], rng: random.Random) -> tuple[Product, float] | None:
    if not isinstance(item, dict):
        raise LevelFormatError(f"{path}: product #{n} is a {type(item).__name__}, not a JSON object "
                               "(expected WebShop's items_shuffle.json: a list of product objects)")
    asin = item.get("asin")
    if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or not asin:
        return None
    prices, tag = _webshop_price(item.get("pricing"))
    price = prices[0] if len(prices) == 1 else rng.uniform(*prices[:2])
    options: dict[str, tuple[str, ...]] = {}
    custom = item.get("customization_options") or {}
    if not isinstance(custom, dict):
        raise LevelFormatError(f"{path}: product {asin}: customization_options must be an object "
                               f"of option name -> values, got {type(custom).__name__}")
    for opt, contents in custom.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise LevelFormatError(f"{path}: product {asin}: option {opt!r} must list its values")
        values = []
        for v in contents:
            raw = v.get("value") if isinstance(v, dict) else v
            if raw is None:
                raise LevelFormatError(f"{path}: product {asin}: a value of option {opt!r} has no 'value'")
            values.append(str(raw).strip().replace("/", " | ").lower())
        options[str(opt).lower()] = tuple(values)
    bullets = item.get("small_description") or []
    entry = ins.get(asin) or {}
    if not isinstance(entry, dict):
        entry = {}
    attributes = entry.get("attributes") or ["DUMMY_ATTR"]
    product = Product(
        asin=asin, name=str(item.get("name") or ""), category=str(item.get("category") or ""),
        query=str(item.get("query") or "").lower().strip(),
        product_category=str(item.get("product_category") or ""), price=float(price),
        attributes=tuple(str(a) for a in attributes), options=options,
        description=str(item.get("full_description") or ""),
        bullets=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
        rating=None, instruction=entry.get("instruction"), price_text=tag)
    return product, price


def load_official_catalog(products_file: str | Path, instructions_file: str | Path, seed: int = 0,
                          goal_source: str = "synthetic", human_file: str | Path | None = None) -> OfficialCatalog:
    """WebShop's own product and instruction files (see the module docstring), read once into an
    on-disk store (SQLite, under the arlgym cache) that later loads reuse: products and goals are
    read from it when asked for, so memory stays bounded at any file size."""
    products_file, instructions_file = Path(products_file), Path(instructions_file)
    if goal_source not in ("synthetic", "human"):
        raise ConfigError(f"goal_source={goal_source!r} is invalid: expected 'synthetic' or 'human'")
    files = [products_file, instructions_file]
    if goal_source == "human":
        if human_file is None:
            raise ConfigError("goal_source='human' needs WebShop's items_human_ins.json next to the product file")
        files.append(Path(human_file))
    for f in files:
        if not f.is_file():
            raise ConfigError(f"WebShop data file {str(f)!r} does not exist (items_shuffle_1000.json, "
                              "items_ins_v2_1000.json and items_human_ins.json come from WebShop's data download)")
    stamp = ":".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    fingerprint = _digest(f"{_STORE_VERSION}:{stamp}:{seed}:{goal_source}")
    folder = cache_root() / "webshop" / f"official-{fingerprint}"
    if not (folder / "meta.json").is_file():
        _build_store(folder, products_file, instructions_file, Path(human_file) if human_file else None,
                     seed, goal_source)
    return OfficialCatalog(folder, fingerprint)


_STORE_VERSION = "store-2"


def _ins_entries(path: Path) -> Iterator[tuple[str, str]]:
    try:
        for asin, entry in iter_json_object(path):
            entry = entry if isinstance(entry, dict) else {}
            yield str(asin), json.dumps({k: entry.get(k) for k in ("attributes", "instruction", "instruction_attributes")})
    except json.JSONDecodeError as e:
        if str(e).startswith("expected a JSON object"):
            raise LevelFormatError(f"WebShop instruction file {str(path)!r} must be a JSON object of asin -> "
                                   "{instruction, instruction_attributes, attributes}") from e
        raise LevelFormatError(f"WebShop instruction file {str(path)!r} is not valid JSON: {e}") from e
    except UnicodeDecodeError as e:
        raise LevelFormatError(f"WebShop instruction file {str(path)!r} is not UTF-8 text: {e}") from e


def _build_store(folder: Path, products_file: Path, instructions_file: Path, human_file: Path | None,
                 seed: int, goal_source: str) -> None:
    import shutil
    import sqlite3
    import tempfile

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
    try:
        db = sqlite3.connect(tmp / "store.sqlite")
        db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                         "CREATE TABLE ins (asin TEXT PRIMARY KEY, data TEXT);"
                         "CREATE TABLE products (idx INTEGER PRIMARY KEY, asin TEXT UNIQUE, data TEXT);"
                         "CREATE TABLE goals (gid INTEGER PRIMARY KEY, data TEXT);")
        batch: list[tuple[str, str]] = []
        for row in _ins_entries(instructions_file):
            batch.append(row)
            if len(batch) >= 10_000:
                db.executemany("INSERT OR REPLACE INTO ins VALUES (?, ?)", batch)
                batch = []
        db.executemany("INSERT OR REPLACE INTO ins VALUES (?, ?)", batch)
        human: dict = {}
        if goal_source == "human":
            human = _load_json(human_file, "human instruction")  # type: ignore[arg-type]
            if not isinstance(human, dict):
                raise LevelFormatError(f"{human_file}: expected a JSON object of asin -> list of instructions")

        class _Ins(Mapping):  # the instruction entries, looked up in the store
            def __getitem__(self, asin: str) -> Any:
                row = db.execute("SELECT data FROM ins WHERE asin = ?", (asin,)).fetchone()
                if row is None:
                    raise KeyError(asin)
                return json.loads(row[0])

            def __iter__(self) -> Iterator[str]:
                return iter(())

            def __len__(self) -> int:
                return 0

        ins = _Ins()
        rng = random.Random(seed)  # WebShop draws range prices with the global `random`; ours is seeded
        n_products = n_goals = 0
        try:
            for n, item in enumerate(iter_json_array(products_file)):
                made = _official_product(item, products_file, n, ins, rng)
                if made is None:
                    continue
                p, price = made
                cur = db.execute("INSERT OR IGNORE INTO products VALUES (?, ?, ?)",
                                 (n_products, p.asin, json.dumps(_product_row(p))))
                if cur.rowcount != 1:
                    continue  # a repeated asin: WebShop keeps the first
                if goal_source == "synthetic":
                    entry = ins.get(p.asin) or {}
                    goals = goals_for(p, rng, attributes=entry.get("instruction_attributes") or ())
                    rows = [[n_products, g.options, g.price_upper, g.instruction, list(g.attributes)] for g in goals]
                else:
                    rows = []
                    for entry in human.get(p.asin) or []:
                        attrs = list((entry or {}).get("instruction_attributes") or ())
                        if not attrs or not entry.get("instruction"):
                            continue
                        bound = price_bound(price, rng)
                        opts = entry.get("instruction_options") or []
                        rows.append([n_products, opts, bound, str(entry["instruction"]).strip(".") + _price_text(bound), attrs])
                db.executemany("INSERT INTO goals VALUES (?, ?)",
                               [(n_goals + k, json.dumps(r)) for k, r in enumerate(rows)])
                n_goals += len(rows)
                n_products += 1
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LevelFormatError(f"WebShop product file {str(products_file)!r} is not a valid JSON array: {e}") from e
        if not n_products:
            raise LevelFormatError(f"{products_file}: no product with an asin")
        if not n_goals:
            raise LevelFormatError(f"{instructions_file}: no product has an instruction with attributes")
        db.execute("DROP TABLE ins")
        db.commit()
        db.execute("VACUUM")
        asins = np.array([a for (a,) in db.execute("SELECT asin FROM products ORDER BY idx")], dtype="U10")
        np.save(tmp / "asins.npy", asins)  # asin_of without a query (40 bytes a product)
        db.close()
        order = list(range(n_goals))
        random.Random(233).shuffle(order)  # WebShop: random.seed(233); random.shuffle(goals)
        np.save(tmp / "goal_order.npy", np.asarray(order, dtype=np.int64))
        (tmp / "meta.json").write_text(json.dumps({"products": n_products, "goals": n_goals,
                                                   "source": str(products_file)}))
        if folder.exists() and not (folder / "meta.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete one
        try:
            tmp.replace(folder)
        except OSError:  # another process stored it first: keep theirs
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _product_row(p: Product) -> list:
    return [p.asin, p.name, p.category, p.query, p.product_category, p.price, list(p.attributes),
            [[k, list(v)] for k, v in p.options.items()], p.description, list(p.bullets), p.instruction,
            p.price_text]


class OfficialCatalog:
    """WebShop's product files, read from the on-disk store :func:`load_official_catalog` made;
    ``products``, ``goals`` and ``by_asin`` behave as a list, a list and a dict."""

    def __init__(self, folder: Path, fingerprint: str) -> None:
        import threading

        meta = json.loads((folder / "meta.json").read_text())
        self.folder, self.fingerprint = folder, fingerprint
        self._order = np.load(folder / "goal_order.npy", mmap_mode="r")
        self._asins = np.load(folder / "asins.npy", mmap_mode="r")
        self._local = threading.local()
        self.product = lru_cache(maxsize=8192)(self.product)  # type: ignore[method-assign]
        self.products: Sequence[Product] = _LazySeq(int(meta["products"]), self.product)
        self.goals: Sequence[Goal] = _LazySeq(int(meta["goals"]), self.goal)
        self.by_asin: Mapping[str, Product] = _AsinMap(self)

    def _db(self) -> Any:
        import sqlite3

        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(f"file:{self.folder / 'store.sqlite'}?mode=ro", uri=True,
                                                  check_same_thread=False)
        return db

    @staticmethod
    def _decode(data: str) -> Product:
        r = json.loads(data)
        return Product(asin=r[0], name=r[1], category=r[2], query=r[3], product_category=r[4], price=r[5],
                       attributes=tuple(r[6]), options={k: tuple(v) for k, v in r[7]}, description=r[8],
                       bullets=tuple(r[9]), rating=None, instruction=r[10], price_text=r[11])

    def product(self, i: int) -> Product:
        row = self._db().execute("SELECT data FROM products WHERE idx = ?", (int(i),)).fetchone()
        if row is None:
            raise IndexError(i)
        return self._decode(row[0])

    def asin_of(self, i: int) -> str:
        return str(self._asins[int(i)])

    def asins_of(self, numbers: Iterable[int]) -> list[str]:
        return [str(a) for a in self._asins[np.asarray(numbers, dtype=np.int64)]]

    def index_of(self, asin: str) -> int | None:
        row = self._db().execute("SELECT idx FROM products WHERE asin = ?", (asin,)).fetchone()
        if row is None and asin != asin.upper():
            row = self._db().execute("SELECT idx FROM products WHERE asin = ?", (asin.upper(),)).fetchone()
        return None if row is None else int(row[0])

    def goal(self, j: int) -> Goal:
        row = self._db().execute("SELECT data FROM goals WHERE gid = ?", (int(self._order[j]),)).fetchone()
        i, opts, bound, instruction, attrs = json.loads(row[0])
        p = self.product(i)
        return Goal(asin=p.asin, instruction=instruction, attributes=tuple(attrs),
                    options=dict(opts) if isinstance(opts, dict) else tuple(opts), price_upper=float(bound),
                    query=p.query, name=p.name, product_category=p.product_category, category=p.category)

    def listing(self, field: str, value: str) -> list[int]:
        """See :meth:`Catalog.listing` (a scan of the store)."""
        return _scan_listing(self.iter_products(), field, value)

    def iter_products(self) -> Iterator[Product]:
        import sqlite3

        db = sqlite3.connect(f"file:{self.folder / 'store.sqlite'}?mode=ro", uri=True)
        try:
            for (data,) in db.execute("SELECT data FROM products ORDER BY idx"):
                yield self._decode(data)
        finally:
            db.close()

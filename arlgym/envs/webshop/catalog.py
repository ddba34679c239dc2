"""WebShop products and goals: a seeded synthetic catalog (offline default) and the official
product / instruction files.

A product has WebShop's fields: ``asin``, ``name`` (title), ``category`` (one of WebShop's five),
``query`` (the product type it was scraped for), ``product_category`` (a ``›`` path), ``price``,
``attributes`` (what an instruction may ask for), ``options`` (name → values, e.g. size and
color), ``description`` and ``bullets``. A goal asks for one product type with some attributes,
one value per option and a price bound, worded as WebShop's synthetic instructions are
("i need a … , and price lower than 40.00 dollars"); the product it was made from scores 1.

**Official data** (``load_official_catalog``): WebShop's ``items_shuffle_1000.json`` (or the full
``items_shuffle.json``) with ``items_ins_v2_1000.json`` (instruction text and attributes per
asin); goals are synthesised from them the way WebShop's ``get_synthetic_goals`` does (every
option combination of every product with an instruction, a price bound drawn from the bounds
above its price).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arlgym.errors import ConfigError

__all__ = ["Product", "Goal", "Catalog", "generate_catalog", "load_official_catalog", "goals_for"]


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


@dataclass(frozen=True)
class Goal:
    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: dict[str, str]
    price_upper: float
    query: str
    name: str
    product_category: str
    category: str


@dataclass
class Catalog:
    products: list[Product]
    goals: list[Goal]

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}


# ----------------------------------------------------------------------------- synthetic
# Per category: product types (query, noun phrase), the attributes instructions ask for, and
# the options a product may have. Enough variety that search must read the instruction.
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
                    "style": ["standard", "pro", "2 pack", "with case", "mini"]},
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
_BRANDS = ["acme", "northwind", "bluepeak", "everly", "solace", "kinetic", "harbor", "maple & co",
           "zenith", "lumen", "orchard", "vantage", "copperline", "driftwood", "nimbus", "terra"]
_PRICE_BOUNDS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 150.0, 200.0,
                 300.0, 400.0, 500.0, 1000.0)
_PREFIXES = ("i need", "i am looking for", "i want", "find me", "i'm looking for", "get me")


def _asin(rng: np.random.Generator) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "B0" + "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=8))


def _product(rng: np.random.Generator, category: str, used: set[str]) -> Product:
    spec = _CATEGORIES[category]
    asin = _asin(rng)
    while asin in used:
        asin = _asin(rng)
    used.add(asin)
    kind = str(rng.choice(spec["types"]))
    attrs = tuple(str(a) for a in rng.choice(spec["attributes"], size=int(rng.integers(2, 4)), replace=False))
    brand = str(rng.choice(_BRANDS))
    shown = attrs[: int(rng.integers(1, len(attrs) + 1))]
    name = f"{brand.title()} {kind.title()} - " + ", ".join(a.title() for a in shown)
    options: dict[str, tuple[str, ...]] = {}
    for opt, values in spec["options"].items():
        if rng.random() < 0.85:
            k = int(rng.integers(2, min(5, len(values)) + 1))
            options[opt] = tuple(str(v) for v in rng.choice(values, size=k, replace=False))
    price = float(np.round(rng.uniform(5, 150) if category != "furniture" else rng.uniform(30, 400), 2))
    bullets = tuple(f"{a.capitalize()}: designed to be {a} for everyday use." for a in attrs)
    description = (f"This {kind} from {brand.title()} is {', '.join(attrs[:-1])} and {attrs[-1]}. "
                   f"A reliable choice in {spec['path'].lower()}.")
    instruction = (f"{rng.choice(_PREFIXES)} {'a ' if not kind.endswith('s') else ''}{kind} "
                   f"that is {' and '.join(attrs)}")
    return Product(asin=asin, name=name, category=category, query=kind,
                   product_category=f"{spec['path']} › {category.title()} › {kind.title()}",
                   price=price, attributes=attrs, options=options, description=description,
                   bullets=bullets, rating=float(np.round(rng.uniform(3.0, 5.0), 1)),
                   instruction=instruction)


def goals_for(product: Product, rng: np.random.Generator) -> list[Goal]:
    """WebShop's synthetic goals of one product: one per option combination, each with a price
    bound drawn from the round bounds above the product's price (none if fewer than 2)."""
    if not product.instruction or not product.attributes:
        return []
    above = [b for b in _PRICE_BOUNDS if b > product.price][:4]
    if len(above) >= 2:
        price_upper = float(sorted(rng.choice(above, size=2, replace=False))[1])
        price_text = f", and price lower than {price_upper:.2f} dollars"
    else:
        price_upper, price_text = 1_000_000.0, ""
    names = sorted(product.options)
    goals = []
    for combo in itertools.product(*(product.options[n] for n in names)):
        chosen = dict(zip(names, combo, strict=True))
        option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
        goals.append(Goal(asin=product.asin,
                          instruction=product.instruction + (f" with {option_text}" if option_text else "") + price_text,
                          attributes=product.attributes, options=chosen, price_upper=price_upper,
                          query=product.query, name=product.name,
                          product_category=product.product_category, category=product.category))
    return goals


def generate_catalog(num_products: int = 1000, seed: int = 0, goals_per_product: int = 2) -> Catalog:
    """A synthetic catalog of ``num_products`` (equal shares of the five categories) and up to
    ``goals_per_product`` goals each (a sample of its option combinations), shuffled with a
    fixed seed so the goal list — and so the splits — are the same everywhere."""
    if num_products < 5:
        raise ConfigError(f"num_products must be >= 5, got {num_products}")
    rng = np.random.default_rng(seed)
    used: set[str] = set()
    categories = list(_CATEGORIES)
    products = [_product(rng, categories[i % len(categories)], used) for i in range(num_products)]
    goals: list[Goal] = []
    for product in products:
        mine = goals_for(product, rng)
        if len(mine) > goals_per_product:
            mine = [mine[int(i)] for i in sorted(rng.choice(len(mine), size=goals_per_product, replace=False))]
        goals += mine
    order = np.random.default_rng(233).permutation(len(goals))  # WebShop shuffles with seed 233
    return Catalog(products, [goals[int(i)] for i in order])


# ----------------------------------------------------------------------------- official data
def _price(pricing: Any) -> float | None:
    numbers = re.findall(r"\d+(?:\.\d+)?", str(pricing).replace(",", "")) if pricing else []
    return float(numbers[0]) if numbers else None


def load_official_catalog(products_file: str | Path, instructions_file: str | Path,
                          seed: int = 0) -> Catalog:
    """WebShop's own product and instruction files (see the module docstring)."""
    products_file, instructions_file = Path(products_file), Path(instructions_file)
    for f in (products_file, instructions_file):
        if not f.is_file():
            raise ConfigError(f"WebShop data file {str(f)!r} does not exist (items_shuffle_1000.json "
                              "and items_ins_v2_1000.json from WebShop's data download)")
    try:
        raw_products = json.loads(products_file.read_text(encoding="utf-8"))
        raw_ins = json.loads(instructions_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"WebShop data is not valid JSON: {e}") from e
    if not isinstance(raw_products, list) or not isinstance(raw_ins, dict):
        raise ConfigError("expected a JSON list of products and a JSON object of instructions by asin")
    products = []
    seen: set[str] = set()
    for item in raw_products:
        asin = item.get("asin")
        price = _price(item.get("pricing"))
        if not asin or asin in seen or price is None:
            continue
        seen.add(asin)
        ins = raw_ins.get(asin, {})
        options = {}
        for opt, values in (item.get("customization_options") or {}).items():
            vals = tuple(str(v.get("value") if isinstance(v, dict) else v).strip().lower() for v in values or [])
            if vals:
                options[str(opt).lower()] = vals
        bullets = item.get("small_description") or []
        products.append(Product(
            asin=asin, name=str(item.get("name", "")), category=str(item.get("category", "")),
            query=str(item.get("query", "")).lower(), product_category=str(item.get("product_category", "")),
            price=price, attributes=tuple(ins.get("instruction_attributes") or ins.get("attributes") or ()),
            options=options, description=str(item.get("full_description") or ""),
            bullets=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
            rating=None, instruction=ins.get("instruction")))
    if not products:
        raise ConfigError(f"{products_file}: no product with an asin and a price")
    rng = np.random.default_rng(seed)
    goals = [g for p in products for g in goals_for(p, rng)]
    if not goals:
        raise ConfigError(f"{instructions_file}: no product has an instruction with attributes")
    order = np.random.default_rng(233).permutation(len(goals))
    return Catalog(products, [goals[int(i)] for i in order])

"""WebShop as the original: purchase scores worked by hand from WebShop's ``get_reward`` (named
options, colour shrinking, attribute in the title, price bound, product-type factor), golden page
text of every page type, the order of clickables, and the action semantics of its text env."""

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.envs.webshop.catalog import Catalog, Goal, Product
from arlgym.envs.webshop.engine import ShopSession
from arlgym.envs.webshop.reward import normalize_color, purchase_score, token_set_ratio
from arlgym.envs.webshop.search import ProductIndex, build_bm25


@pytest.fixture(autouse=True, scope="module")
def _own_cache(own_arlgym_cache):
    """Indexes and product stores go to a temporary cache, not the user's ~/.cache."""

TEE = Product(asin="B0TEE00001", name="Acme Men's T-Shirt - Machine Washable", category="fashion",
              query="men's t-shirt", product_category="Clothing › Fashion › Men's T-Shirt", price=15.0,
              attributes=("machine washable", "short sleeve"),
              options={"color": ("navy blue", "white"), "size": ("large", "x-large"), "style": ("standard",)},
              description="A cotton tee.", bullets=("Tumble dry low",))


def _goal(**kw):
    base = dict(asin=TEE.asin, instruction="…", attributes=("machine washable", "cotton", "wrinkle free"),
                options={"color": "blue", "size": "large"}, price_upper=20.0, query=TEE.query, name=TEE.name,
                product_category=TEE.product_category, category="fashion")
    return Goal(**{**base, **kw})


# ------------------------------------------------------------------------- score
def test_colour_shrinking_and_named_option_matching():
    assert normalize_color("navy blue") == "blue" and normalize_color("rose gold") == "gold"
    assert normalize_color("standard") == "tan"                       # WebShop's substring rule
    assert normalize_color(("color", "black")) == "black"             # a pair: an element must *be* a colour
    assert normalize_color(("color", "navy blue")) == ("color", "navy blue")
    # attributes: "machine washable" (fuzzy 100), "cotton" (in the description), not "wrinkle free": 2
    # options: navy blue -> blue = goal's colour word; "large" is a token subset of "size large": 2
    s = purchase_score(TEE, {"color": "navy blue", "size": "large"}, _goal())
    assert (s.attribute_matches, s.option_matches, s.price_ok, s.r_type) == (2, 2, True, 1.0)
    assert s.score == pytest.approx(5 / 6)
    # x-large is not large: token-set ratio of "x large" and "size large" is 83 <= 85
    s = purchase_score(TEE, {"color": "navy blue", "size": "x-large"}, _goal())
    assert s.option_matches == 1 and s.score == pytest.approx(4 / 6)
    # but large satisfies x-large (a subset of "size x large" scores 100) — WebShop's leniency
    assert purchase_score(TEE, {"size": "large"}, _goal(options={"size": "x-large"})).option_matches == 1


def test_a_standard_style_cannot_be_won_as_in_webshop():
    goal = _goal(attributes=("machine washable",), options={"style": "standard"})
    s = purchase_score(TEE, {"style": "standard"}, goal)              # "standard" shrinks to "tan"
    assert s.option_matches == 0 and s.score == pytest.approx(2 / 3)


def test_price_bound_attribute_in_title_and_product_type_factor():
    dear = Product(**{**TEE.__dict__, "price": 25.0})
    s = purchase_score(dear, {"color": "navy blue", "size": "large"}, _goal())
    assert not s.price_ok and s.score == pytest.approx(4 / 6)
    lamp = Product(asin="B0LAMP0001", name="Lumen Floor Lamp - Dimmable", category="furniture",
                   query="floor lamp", product_category="Home & Kitchen › Furniture › Floor Lamp",
                   price=40.0, attributes=("easy assemble",))
    # goal: another type (no query or category match); 1 of its 5 title words is in ours -> 0.2 -> r_type 0.5
    goal = Goal(asin="B0X", instruction="…", attributes=("dimmable", "solid wood"), options={}, price_upper=50.0,
                query="desk", name="Lumen Desk Table Chair Sofa", product_category="Office › Desks",
                category="furniture")
    s = purchase_score(lamp, {}, goal)
    assert s.title_score == pytest.approx(0.2) and s.r_type == 0.5
    assert s.attribute_matches == 1                                   # "dimmable" is in the title
    assert s.score == pytest.approx(0.5 * (1 + 0 + 1) / (2 + 0 + 1))
    assert purchase_score(lamp, {}, Goal(**{**goal.__dict__, "name": "Oak Desk"})).r_type == 0.0


def test_human_goals_match_bare_values():
    goal = _goal(attributes=("machine washable",), options=("navy blue", "large"))
    # both goal values are strings: "navy blue" -> "blue"; "x large" has "large" as a token subset
    assert purchase_score(TEE, {"color": "navy blue", "size": "x-large"}, goal).score == 1.0
    assert token_set_ratio("x-large", "large") == 100


# ------------------------------------------------------------------------- pages
def _shop():
    products = [Product(asin=f"B0SOCK{i:04d}", name=f"Wool Socks Model {i}", category="fashion",
                        query="wool socks", product_category="Clothing › Socks", price=5.0 + i,
                        attributes=("wool",), description="Warm socks.",
                        bullets=("Merino wool", "Machine washable"),
                        options={"color": ("black", "navy blue"), "size": ("large",)})
                for i in range(12)]
    catalog = Catalog(products, [])
    goal = Goal(asin="B0SOCK0000", instruction="i need wool socks", attributes=("wool",),
                options={"color": "black"}, price_upper=10.0, query="wool socks", name=products[0].name,
                product_category="Clothing › Socks", category="fashion")
    return ShopSession(catalog, ProductIndex(build_bm25(catalog), catalog.asin_of), goal)


def _results(first, last, page, prev):
    items = " [SEP] ".join(f"B0SOCK{i:04d} [SEP] Wool Socks Model {i} [SEP] ${5.0 + i}" for i in range(first, last))
    return (f"Back to Search [SEP] Page {page} (Total results: 12) [SEP] " + ("< Prev [SEP] " if prev else "")
            + "Next >" + (f" [SEP] {items}" if items else ""))


def test_golden_page_text_of_every_page_type_and_clickable_order():
    s = _shop()
    assert s.observation() == "Search" and s.admissible() == ["search[<your query>]", "click[search]"]
    s.act("search[wool socks]")
    assert s.observation() == _results(0, 10, 1, prev=False)
    assert s.clickables() == ["back to search", "next >", *(f"b0sock{i:04d}" for i in range(10))]
    s.act("click[next >]")
    assert s.observation() == _results(10, 12, 2, prev=True)
    assert s.clickables() == ["back to search", "< prev", "next >", "b0sock0010", "b0sock0011"]
    s.act("click[next >]")                                           # past the last page, as WebShop
    assert s.observation() == _results(0, 0, 3, prev=True)
    s.act("click[< prev]")
    s.act("click[< prev]")
    s.act("click[b0sock0000]")
    item = ("Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] navy blue [SEP] size [SEP] large [SEP] "
            "Wool Socks Model 0 [SEP] Price: $5.0 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] "
            "Reviews [SEP] Buy Now")
    assert s.observation() == item
    assert s.clickables() == ["back to search", "< prev", "description", "features", "reviews", "buy now",
                              "black", "navy blue", "large"]
    s.act("click[black]")
    assert s.observation() == item and s.chosen == {"color": "black"}  # no "Selected:" line
    s.act("click[description]")
    assert s.observation() == "Back to Search [SEP] < Prev [SEP] Warm socks."
    assert s.clickables() == ["back to search", "< prev"]
    s.act("click[< prev]")
    s.act("click[features]")
    assert s.observation() == "Back to Search [SEP] < Prev [SEP] Merino wool [SEP] Machine washable"
    s.act("click[< prev]")
    s.act("click[reviews]")
    assert s.observation() == "Back to Search [SEP] < Prev"            # no "No reviews yet."
    s.act("click[< prev]")
    assert s.page == "item" and s.chosen == {"color": "black"}        # a tab keeps the options
    s.act("click[< prev]")
    assert s.observation() == _results(0, 10, 1, prev=False) and s.chosen == {}
    s.act("search[zzzz]")
    assert s.observation() == "Back to Search [SEP] Page 1 (Total results: 0) [SEP] Next >"


def test_action_semantics_of_webshops_text_env():
    s = _shop()
    for ignored in ("Search[wool socks]", " search[wool socks]", "search[]", "click[buy now]", "buy"):
        assert not s.act(ignored).valid and s.page == "search"
    assert s.act("search[wool socks] please").valid and s.query == "wool socks" and s.page == "results"
    s.act("click[b0sock0001]")
    assert s.page == "item"
    assert s.act("search[model 11]").valid                             # a new search from an item page
    assert s.page == "results" and s.page_no == 1 and s.results[0] == "B0SOCK0011" and s.asin is None
    s.act("click[next >]")
    assert s.act("search[Wool Socks]").valid and s.page_no == 1         # and from a results page
    assert not s.act("click [b0sock0000]").valid and s.page == "results"
    s.act("click[b0sock0000]")
    assert not s.act("click[next >]").valid                            # not on an item page
    s.act("click[black]")
    step = s.act("click[Buy Now]")
    assert step.done and step.score.score == 1.0


def test_env_flags_ignored_actions_invalid_and_prices_as_webshop_writes_them():
    env = gym.make("arl/WebShop-v0").unwrapped
    env.reset(options={"task_id": "goal-0"})
    info = env.step("<think>t</think><action>Search[shoe rack]</action>")[4]
    assert not info["action_valid"] and info["raw_observation"] == "Search"
    info = env.step("<think>t</think><action>search[shoe rack] please</action>")[4]
    assert info["action_valid"] and info["raw_observation"].startswith("Back to Search [SEP] Page 1")
    price = info["raw_observation"].split(" [SEP] ")[5]
    assert price == f"${float(price[1:])}"                             # Python's float text: $15.0, $10.99


def test_webshops_special_searches():
    from arlgym.envs.webshop.catalog import _scan_listing, generate_catalog

    env = gym.make("arl/WebShop-v0").unwrapped
    env.reset(options={"task_id": "goal-0"})
    catalog, session = env.catalog, env.session
    for query, field, value in (("<c> beauty", "category", "beauty"), ("<q> bar stool", "query", "bar stool"),
                                ("<a> vegan", "attributes", "vegan")):
        assert session.act(f"search[{query}]").valid
        assert session.observation().startswith(f"Back to Search [SEP] Page 1 (Total results: {len(session.results)})")
        listed = [catalog.by_asin[a] for a in session.results[:]]
        assert listed and all(value == getattr(p, field) or value in p.attributes for p in listed)
        assert list(session.results[:]) == [catalog.asin_of(i) for i in _scan_listing(catalog.iter_products(), field, value)]
    session.act("search[<c> beauty]")
    assert len(session.results) == 200                                # every beauty product, not 50
    session.act("search[<a> no such attribute]")
    assert len(session.results) == 0                                  # WebShop's <a> crashes here
    session.act("search[<r>]")
    first = list(session.results[:])
    session.act("search[<r>]")
    assert len(first) == 50 and list(session.results[:]) == first     # seeded by the page state
    small = generate_catalog(300, seed=4)
    for field, value in (("category", "food"), ("query", "green tea"), ("attributes", "gluten free")):
        assert small.listing(field, value) == _scan_listing(small.iter_products(), field, value)

"""``arlgym webshop serve``: shop in your own browser on the same site the agents use."""

from __future__ import annotations

import argparse

from arlgym.clikit import host_name, port_number
from arlgym.core.sockets import serve_until_interrupted
from arlgym.envs.webshop.engine import ShopSession
from arlgym.envs.webshop.env import load_shop, split_range
from arlgym.envs.webshop.server import ShopServer

__all__ = ["add_subparser"]


def _serve(args: argparse.Namespace) -> int:
    import numpy as np


    catalog, index = load_shop(args.data_dir, args.num_products, args.catalog_seed, args.goal_source)
    low, high = split_range(args.split, len(catalog.goals))
    rng = np.random.default_rng(args.seed)
    server = ShopServer(host=args.host, port=args.port, max_sessions=args.max_sessions, ttl=args.ttl)
    server.new_session_factory = lambda: ShopSession(catalog, index, catalog.goals[int(rng.integers(low, high))])
    server.warm_up()
    print(f"WebShop: {len(catalog.products)} products, {high - low} {args.split} goals. "
          f"Open {server.url}/ (each visit: a new goal; a session "
          f"unused for {args.ttl:g} s is forgotten). Ctrl-C stops.")
    return serve_until_interrupted(server.serve_forever)


def add_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("webshop", help="WebShop tools (serve the site)",
                                   description="WebShop tools.")
    sub = parser.add_subparsers(dest="webshop_command", required=True)
    serve = sub.add_parser("serve", help="serve the shop on loopback for a person to use",
                           description="Serve the WebShop site (the one arl/WebShopBrowser-v0 "
                                       "drives) so a person can shop in a browser; each visit to "
                                       "/ draws a new goal and shows its score after the purchase.")
    serve.add_argument("--host", type=host_name, default="127.0.0.1", help="address (default: 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=8765, help="port (default: 8765; 0: any free)")
    serve.add_argument("--split", default="test", help="goal split (default: test)")
    serve.add_argument("--data-dir", default=None, help="WebShop's product files (default: synthetic catalog)")
    serve.add_argument("--num-products", type=int, default=1000, help="synthetic catalog size (default: 1000)")
    serve.add_argument("--catalog-seed", type=int, default=0, help="synthetic catalog seed (default: 0)")
    serve.add_argument("--goal-source", default="synthetic", choices=("synthetic", "human"),
                       help="WebShop's synthetic goals or its human-written ones (needs --data-dir)")
    serve.add_argument("--seed", type=int, default=0, help="goal draw seed (default: 0)")
    serve.add_argument("--max-sessions", type=int, default=10_000,
                       help="sessions held at most; the least recently used go first (default: 10000)")
    serve.add_argument("--ttl", type=float, default=3600.0,
                       help="seconds an unused session is kept (default: 3600)")
    serve.set_defaults(func=_serve)
    return parser

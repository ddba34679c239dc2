"""WebShop: find and buy the product an instruction describes (``arl/WebShop-v0``)."""

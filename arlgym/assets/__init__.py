"""Files shipped with arlgym (the ``tiny`` model's tokenizer) and the scripts that build them."""

"""Examples of user code on deltaport (`code:` in deltaport.yaml); the demo loads them."""

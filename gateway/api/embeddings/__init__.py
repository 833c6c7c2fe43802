"""``POST /v1/embeddings``: OpenAI's embeddings API over the gateway's routes (parser, tokens, renderer, endpoint)."""

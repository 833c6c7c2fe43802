"""The Redis layer every Redis domain store shares: RedisIO (client.py), connect, batch, key naming."""

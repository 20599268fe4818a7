"""Content-addressed response cache (arrives with the cache work)."""

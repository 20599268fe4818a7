"""Providers: each turns IR requests into IR event streams for one upstream."""

"""OLP's benchmark: the upstream direct, a minimal passthrough and OLP, side by side in one run.

See bench/README.md. Nothing here is imported by `olp` itself.
"""

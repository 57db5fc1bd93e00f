"""Seed optimization and top-k search on Ray Tune: cull at cull_at of the steps, resume the best."""

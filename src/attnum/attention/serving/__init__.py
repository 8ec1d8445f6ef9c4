"""Serving-side arithmetic: decode and split-KV, paged caches, merges of partial states, MLA, split rules."""

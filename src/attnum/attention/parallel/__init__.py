"""Attention across devices: context-parallel (ring) attention over sequence shards."""

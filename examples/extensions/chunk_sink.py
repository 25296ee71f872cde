"""An on_chunk subscriber that only receives: the bench's out-of-process on_chunk load."""

from mull_ext import serve

seen = {"chunks": 0}


def on_chunk(chunk, host):
    seen["chunks"] += 1


serve(on_chunk=on_chunk)

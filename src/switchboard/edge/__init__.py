"""What a request meets before any face reads it: the warm-up front app, connection limits, the one
``Authorization`` header, the JSON boundary and the per-endpoint session and stream caps."""

"""The build system: plans of nodes, cache keys, the content-addressed store, the rebuilder and the
scheduler. It knows stages only as names with code, never what one does."""

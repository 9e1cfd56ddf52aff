"""GridGraph's Processing algorithms: thin adapters over ``gridgraph.core``."""

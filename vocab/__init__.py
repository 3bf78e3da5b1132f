"""The shared vocabulary every stage stands on: the metric catalog (the wire format), entity
indices, typed settings and the fault/XID registry. It imports no stage and no program module."""

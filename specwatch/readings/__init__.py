"""Snapshots turned into figures over a window: counter increases that survive resets and restarts,
histogram quantiles from bucket deltas, acceptance and the tokens the steps computed (`figures`),
the sliding window per target and engine (`window`), and the latency, request-shape and goodput
block (`health`). Arithmetic on counters, no judgement."""

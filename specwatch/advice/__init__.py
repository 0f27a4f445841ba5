"""The advice: from a window's figures to the verdict an operator reads.

`advisor` composes the parts that decide (which GPU this is, what the drafter costs, the live
step-time samples and their fit, the judgement, the words of the reasons) around `perf.decide`;
`verdict` is its output; `monitor` runs a window and an advisor per target for every front end and
holds the shown verdict steady. `predict` and `tune` ask the same model offline, and
`sweep_evidence` is what a saved sweep tells the advisor."""

"""What the sources read, as one type: the Snapshot (per target the engines' counters, gauges and
histograms; per GPU each field a value or N/A with its reason), the names of the GPUs' clock-event
bits, the URLs the sources read, and the Prometheus text parser they share. No I/O and no advice
here: the sources themselves are `specwatch.collectors`, and nothing in this package judges."""

"""Report renderers, one module per format: the node report's (node/) and the cluster handoff report's
(cluster/), and what both share (values, per-GPU figures, JUnit XML)."""

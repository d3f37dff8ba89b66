"""MirrorMaker 2 flows as the management plane keeps them: `kaas mirror` and its API routes
write `/kaas/<target>/mirror/flows/<flow>` through journaled operations; the target
cluster's agents run the flows."""

"""A ZooKeeper-mode cluster's migration to KRaft (KIP-866) as a management-plane operation."""

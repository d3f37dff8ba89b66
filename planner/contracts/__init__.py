"""What the planes agree on: every value that crosses ZooKeeper between the agent and the
management plane (paths, spec, member records, journal entries, plan records) and what a VM
runs for a given spec (the broker's and ZooKeeper's configuration). Each value has one typed
definition and one parser here; nothing else reads those znodes as raw dicts."""

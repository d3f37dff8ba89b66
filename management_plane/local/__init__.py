"""The local provider: KaaS VMs as process groups on this machine, each on its own loopback address."""

"""The cluster's public-key infrastructure: its certificate authority, the certificates it
issues to VMs and to KaaS's own clients, and where they live on disk."""

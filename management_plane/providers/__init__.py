"""Where VMs come from: one interface (base.Provider), a local and an AWS implementation."""

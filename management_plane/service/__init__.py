"""The management plane service (`kaas serve`): HTTP API, its database, the operations engine
and the controller that converges clusters through a provider."""

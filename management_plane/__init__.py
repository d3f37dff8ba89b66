"""management_plane package."""

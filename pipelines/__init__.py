"""mptfx pipeline definition, configuration, runners and CLI."""

"""The host's outer layer: the command line (and, later, the MCP server and transports)."""

__all__: list[str] = []

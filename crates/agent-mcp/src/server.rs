//! Serving a registry as an MCP server.

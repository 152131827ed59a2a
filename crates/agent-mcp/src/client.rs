//! Importing tools from MCP servers.

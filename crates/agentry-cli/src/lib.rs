//! The parts of the `agentry` command that other code reuses: the [`products`] catalog, a
//! SQLite-backed [resource](agent_tools::resource) the CLI can serve as tools and tests and
//! examples run agents against.
//!
//! The command itself is the `agentry` binary (documented in `docs/cli.md`); this library is
//! not a stable API.

pub mod products;

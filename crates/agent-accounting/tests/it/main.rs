//! Rows through the real loop into real stores: a SQLite file and the PostgreSQL at
//! `AGENTRY_TEST_POSTGRES_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod rows;

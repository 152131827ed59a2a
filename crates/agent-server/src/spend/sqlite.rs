//! The spend ledger in the SQLite session file: a second connection of its own (WAL lets it
//! write beside the session store's), used on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, params};

use super::{SpendLedger, Spent};
use crate::store::{StoreError, StoreFuture};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenant_spend (
    tenant TEXT NOT NULL,
    period TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period)
) WITHOUT ROWID;
";

const ADD: &str = "
INSERT INTO tenant_spend (tenant, period, tokens, usd) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, period) DO UPDATE SET
    tokens = tokens + excluded.tokens,
    usd = usd + excluded.usd";

const TOTAL: &str = "SELECT tokens, usd FROM tenant_spend WHERE tenant = ?1 AND period = ?2";

/// Per-tenant spend in the `tenant_spend` table of a SQLite file.
pub struct SqliteLedger {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl SqliteLedger {
    /// Opens `path` (the session file) and creates the table if needed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] when the file cannot be opened or the table created.
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        let opened = path.clone();
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection, rusqlite::Error> {
            let conn = Connection::open(&opened)?;
            // The session store's thread holds write transactions too: wait for it rather
            // than fail.
            conn.busy_timeout(Duration::from_secs(10))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.execute_batch(SCHEMA)?;
            Ok(conn)
        })
        .await
        .map_err(|error| StoreError::Database(format!("opening the spend ledger: {error}")))?
        .map_err(|error| StoreError::Database(format!("opening the spend ledger: {error}")))?;
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn call<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            op(&mut conn)
        })
        .await
        .map_err(|error| StoreError::Database(format!("spend ledger: {error}")))?
        .map_err(|error| StoreError::Database(format!("spend ledger: {error}")))
    }
}

impl SpendLedger for SqliteLedger {
    fn add<'a>(
        &'a self,
        tenant: &'a str,
        periods: &'a [String],
        spent: Spent,
    ) -> StoreFuture<'a, ()> {
        let tenant = tenant.to_owned();
        let periods = periods.to_vec();
        Box::pin(self.call(move |conn| {
            let tokens = i64::try_from(spent.tokens).unwrap_or(i64::MAX);
            let tx = conn.transaction()?;
            {
                let mut add = tx.prepare_cached(ADD)?;
                for period in &periods {
                    add.execute(params![tenant, period, tokens, spent.usd])?;
                }
            }
            tx.commit()
        }))
    }

    fn totals<'a>(&'a self, tenant: &'a str, periods: &'a [String]) -> StoreFuture<'a, Vec<Spent>> {
        let tenant = tenant.to_owned();
        let periods = periods.to_vec();
        Box::pin(self.call(move |conn| {
            let mut total = conn.prepare_cached(TOTAL)?;
            periods
                .iter()
                .map(|period| {
                    match total.query_row(params![tenant, period], |row| {
                        Ok(Spent {
                            tokens: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                            usd: row.get(1)?,
                        })
                    }) {
                        Ok(spent) => Ok(spent),
                        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(Spent::default()),
                        Err(error) => Err(error),
                    }
                })
                .collect()
        }))
    }
}

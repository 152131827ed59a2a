//! The spend ledger in PostgreSQL: its own connection to the store's database, so every
//! instance sharing the database shares the totals.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

use super::{SpendLedger, Spent};
use crate::store::{StoreError, StoreFuture};

/// Serializes the schema creation of instances starting at once (an arbitrary constant of
/// this table's own).
const SCHEMA_LOCK: i64 = 0x6167_656e_7473_7064;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenant_spend (
    tenant TEXT NOT NULL,
    period TEXT NOT NULL,
    tokens BIGINT NOT NULL DEFAULT 0,
    usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period)
);
";

/// One statement for every period: atomic, one round trip.
const ADD: &str = "
INSERT INTO tenant_spend (tenant, period, tokens, usd)
SELECT $1, period, $3, $4 FROM unnest($2::text[]) AS period
ON CONFLICT (tenant, period) DO UPDATE SET
    tokens = tenant_spend.tokens + EXCLUDED.tokens,
    usd = tenant_spend.usd + EXCLUDED.usd";

const TOTALS: &str =
    "SELECT period, tokens, usd FROM tenant_spend WHERE tenant = $1 AND period = ANY($2::text[])";

/// Per-tenant spend in the `tenant_spend` table of a PostgreSQL database.
pub struct PostgresLedger {
    url: String,
    client: Mutex<Arc<Client>>,
}

impl PostgresLedger {
    /// Connects to `url` (without TLS, like the session store) and creates the table if
    /// needed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] when the database cannot be reached or the table created.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = open(url).await?;
        Ok(Self {
            url: url.to_owned(),
            client: Mutex::new(Arc::new(client)),
        })
    }

    /// The live client, reconnecting first when the connection has closed.
    async fn client(&self) -> Result<Arc<Client>, StoreError> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            *client = Arc::new(open(&self.url).await?);
            tracing::info!("spend ledger: reconnected to PostgreSQL");
        }
        Ok(Arc::clone(&client))
    }
}

async fn open(url: &str) -> Result<Client, StoreError> {
    let (mut client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|error| database("connecting to PostgreSQL", &error))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "spend ledger: PostgreSQL connection closed");
        }
    });
    let tx = client
        .transaction()
        .await
        .map_err(|error| database("creating the spend table", &error))?;
    tx.query_one("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(|error| database("creating the spend table", &error))?;
    tx.batch_execute(SCHEMA)
        .await
        .map_err(|error| database("creating the spend table", &error))?;
    tx.commit()
        .await
        .map_err(|error| database("creating the spend table", &error))?;
    Ok(client)
}

fn database(doing: &str, error: &tokio_postgres::Error) -> StoreError {
    let cause =
        std::error::Error::source(error).map_or_else(String::new, |cause| format!(": {cause}"));
    StoreError::Database(format!("spend ledger, {doing}: {error}{cause}"))
}

impl SpendLedger for PostgresLedger {
    fn add<'a>(
        &'a self,
        tenant: &'a str,
        periods: &'a [String],
        spent: Spent,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let tokens = i64::try_from(spent.tokens).unwrap_or(i64::MAX);
            let client = self.client().await?;
            client
                .execute(ADD, &[&tenant, &periods, &tokens, &spent.usd])
                .await
                .map_err(|error| database("recording", &error))?;
            Ok(())
        })
    }

    fn totals<'a>(&'a self, tenant: &'a str, periods: &'a [String]) -> StoreFuture<'a, Vec<Spent>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = client
                .query(TOTALS, &[&tenant, &periods])
                .await
                .map_err(|error| database("reading", &error))?;
            Ok(periods
                .iter()
                .map(|period| {
                    rows.iter()
                        .find(|row| row.get::<_, &str>(0) == period)
                        .map_or_else(Spent::default, |row| Spent {
                            tokens: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
                            usd: row.get(2),
                        })
                })
                .collect())
        })
    }
}

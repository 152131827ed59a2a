//! A product catalog in a SQLite file, exposed as tools: the worked example of
//! [resources as tools](agent_tools::resource).
//!
//! [`Products`] implements every verb, so [`register`] adds `get_product`, `search_product`,
//! `create_product`, `update_product` and `delete_product` to a registry, reading and writing
//! the `products` table of one SQLite file (created when missing). `get` and `search` require
//! `product:read`, the others `product:write`.
//!
//! # Each call is its own unit of work
//!
//! Every call runs on Tokio's blocking pool on a connection of its own (taken from a few kept
//! open between calls, or opened) and does its work in one transaction (an immediate one for
//! `update`, so its read-modify-write cannot interleave with another writer). Parallel calls of
//! one model round run on separate connections and commit independently: a batch never shares
//! a transaction. A cancelled call either commits before its result is dropped or never
//! starts: the transaction runs to its end on the blocking pool. The file is in WAL mode with
//! `synchronous = NORMAL` and a five-second busy timeout, so readers never wait for a writer,
//! writers queue instead of failing, and a commit costs no fsync of its own (it survives a
//! crash of the process; a power loss may lose the last commits, never corrupt the file).
//!
//! # Rules the model cannot break
//!
//! A SKU is 1 to 32 characters of `A-Z`, `0-9` and `-` and unique; a name is 1 to 200
//! characters; a price (in cents) and a stock level are from 0 to 1,000,000,000; an id is an
//! integer from 1. A search returns at most 100 records (20 unless asked), and a call's
//! arguments are at most 16 KiB. Breaking a rule, a taken SKU, an unknown id: each is an
//! error the model sees and can act on. A store that cannot be opened or read is fatal.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = agent_tools::Registry::new();
//! let names = agentry_cli::products::register(&mut tools, "catalog.db".as_ref())?;
//! assert_eq!(names.len(), 5);
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_tools::resource::{
    Create, Delete, Get, Resource, ResourceError, ResourceTools, Search, Update,
};
use agent_tools::{Registry, ToolContext};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most a price or a stock level may be.
pub const MAX_AMOUNT: i64 = 1_000_000_000;

/// How long a writer waits for another before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections kept open between calls.
const MAX_IDLE: usize = 8;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS products (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sku TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents BETWEEN 0 AND 1000000000),
    stock INTEGER NOT NULL CHECK (stock BETWEEN 0 AND 1000000000)
);";

/// A product as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Product {
    /// The product's id.
    pub id: i64,
    /// The stock-keeping unit: unique, `A-Z`, `0-9` and `-`.
    pub sku: String,
    /// The product's name.
    pub name: String,
    /// The price in cents.
    pub price_cents: i64,
    /// Units in stock.
    pub stock: i64,
}

/// A product to add: everything but the id.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProduct {
    /// The stock-keeping unit: 1 to 32 characters of A-Z, 0-9 and `-`, unique.
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Z0-9-]{1,32}$"))]
    pub sku: String,
    /// The product's name, 1 to 200 characters.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// The price in cents.
    #[schemars(range(min = 0, max = 1_000_000_000))]
    pub price_cents: i64,
    /// Units in stock (0 when left out).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000))]
    pub stock: Option<i64>,
}

/// The fields of a product to change; those left out keep their values.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductPatch {
    /// A new SKU (still unique).
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Z0-9-]{1,32}$"))]
    pub sku: Option<String>,
    /// A new name.
    #[schemars(length(min = 1, max = 200))]
    pub name: Option<String>,
    /// A new price in cents.
    #[schemars(range(min = 0, max = 1_000_000_000))]
    pub price_cents: Option<i64>,
    /// A new stock level.
    #[schemars(range(min = 0, max = 1_000_000_000))]
    pub stock: Option<i64>,
}

/// What to look for; every field given must match.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductQuery {
    /// Text the name or the SKU contains (case-insensitive).
    #[schemars(length(max = 200))]
    pub text: Option<String>,
    /// Only products costing at most this many cents.
    pub max_price_cents: Option<i64>,
    /// `true`: only products in stock; `false`: only those out of stock.
    pub in_stock: Option<bool>,
}

/// A product's id: an integer from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct ProductId(i64);

impl ProductId {
    /// The id as stored.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl TryFrom<i64> for ProductId {
    type Error = String;
    fn try_from(id: i64) -> Result<Self, String> {
        if id >= 1 {
            Ok(Self(id))
        } else {
            Err(format!("a product id is an integer from 1, got {id}"))
        }
    }
}

impl From<ProductId> for i64 {
    fn from(id: ProductId) -> Self {
        id.0
    }
}

impl JsonSchema for ProductId {
    fn schema_name() -> Cow<'static, str> {
        "ProductId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": 1,
            "description": "The product's id."
        })
    }
}

/// The catalog: one SQLite file. Cheap to clone; clones share the idle connections.
#[derive(Debug, Clone)]
pub struct Products {
    path: PathBuf,
    /// Connections between calls: each call takes one, runs its transaction on it and gives it
    /// back, so a call does not pay for opening the file (a call never shares a connection
    /// or a transaction with another while it runs).
    idle: Arc<Mutex<Vec<Connection>>>,
}

/// Opening the catalog failed.
#[derive(Debug, thiserror::Error)]
pub enum ProductsError {
    /// The file could not be opened or its table created.
    #[error("the product catalog {path} could not be opened: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The tools could not be registered (a name is taken).
    #[error("the product tools could not be registered: {0}")]
    Register(#[from] agent_tools::Error),
}

impl Products {
    /// Opens (creating when missing) the catalog in `path`, in WAL mode.
    ///
    /// # Errors
    ///
    /// [`ProductsError::Open`] when the file cannot be opened or is not a SQLite database.
    pub fn open(path: &Path) -> Result<Self, ProductsError> {
        let connection = connect(path)
            .and_then(|connection| connection.execute_batch(SCHEMA).map(|()| connection))
            .map_err(|source| ProductsError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            idle: Arc::new(Mutex::new(vec![connection])),
        })
    }

    /// The catalog's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All five verbs with the default permissions and bounds, to adjust before registering
    /// (say `.without_permissions()` for a single-user program).
    pub fn tools(self) -> ResourceTools<Self> {
        ResourceTools::new(self).crud()
    }

    /// Runs `work` on a connection of its own on the blocking pool: one call, one connection
    /// at a time, one transaction.
    async fn with_connection<T, F>(&self, work: F) -> Result<T, ResourceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, ResourceError> + Send + 'static,
    {
        let path = self.path.clone();
        let idle = Arc::clone(&self.idle);
        tokio::task::spawn_blocking(move || {
            let taken = idle.lock().ok().and_then(|mut idle| idle.pop());
            let mut connection = match taken {
                Some(connection) => connection,
                None => connect(&path).map_err(store_error)?,
            };
            let result = work(&mut connection);
            // A connection goes back only outside a transaction, and only as many as are
            // worth keeping.
            if connection.is_autocommit()
                && let Ok(mut idle) = idle.lock()
                && idle.len() < MAX_IDLE
            {
                idle.push(connection);
            }
            result
        })
        .await
        .map_err(|error| ResourceError::internal(format!("a catalog call failed: {error}")))?
    }
}

/// Opens a connection: WAL (readers never wait for the writer), `synchronous = NORMAL` (a
/// commit is durable across a crash of the process, and costs no fsync of its own; a power
/// loss may lose the last commits, never corrupt the file) and a busy timeout (writers queue
/// instead of failing).
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    Ok(connection)
}

/// Registers the five product tools over the catalog in `path` and returns their names.
///
/// # Errors
///
/// [`ProductsError`] when the catalog cannot be opened or a tool name is taken (the registry
/// is then unchanged).
pub fn register(registry: &mut Registry, path: &Path) -> Result<Vec<String>, ProductsError> {
    Ok(Products::open(path)?.tools().register(registry)?)
}

/// A store failure the model can do something about (a busy store: try again) or not.
fn store_error(error: rusqlite::Error) -> ResourceError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            ResourceError::conflict("the catalog is busy; try again")
        }
        _ => ResourceError::internal(format!("the product catalog failed: {error}")),
    }
}

/// A write's failure: a taken SKU is a conflict, a broken CHECK invalid, the rest as
/// [`store_error`].
fn write_error(error: rusqlite::Error, sku: Option<&str>) -> ResourceError {
    if error.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
        let text = error.to_string();
        if text.contains("UNIQUE") {
            return ResourceError::conflict(format!(
                "a product with SKU `{}` already exists; pick another SKU or update that product",
                sku.unwrap_or("?")
            ));
        }
        return ResourceError::invalid(format!("the product breaks a rule: {text}"));
    }
    store_error(error)
}

fn check_sku(sku: &str) -> Result<(), ResourceError> {
    let valid = (1..=32).contains(&sku.len())
        && sku
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(ResourceError::invalid(format!(
            "SKU `{sku}` is not 1 to 32 characters of A-Z, 0-9 and `-`"
        )))
    }
}

fn check_name(name: &str) -> Result<(), ResourceError> {
    let chars = name.chars().count();
    if chars == 0 || chars > 200 || name.trim().is_empty() {
        return Err(ResourceError::invalid(
            "a name is 1 to 200 characters, not only spaces",
        ));
    }
    Ok(())
}

fn check_amount(field: &str, value: i64) -> Result<(), ResourceError> {
    if (0..=MAX_AMOUNT).contains(&value) {
        Ok(())
    } else {
        Err(ResourceError::invalid(format!(
            "`{field}` is from 0 to {MAX_AMOUNT}, got {value}"
        )))
    }
}

fn read_product(row: &rusqlite::Row<'_>) -> rusqlite::Result<Product> {
    Ok(Product {
        id: row.get(0)?,
        sku: row.get(1)?,
        name: row.get(2)?,
        price_cents: row.get(3)?,
        stock: row.get(4)?,
    })
}

const SELECT: &str = "SELECT id, sku, name, price_cents, stock FROM products";

fn find(connection: &Connection, id: i64) -> Result<Product, ResourceError> {
    connection
        .query_row(&format!("{SELECT} WHERE id = ?1"), [id], read_product)
        .optional()
        .map_err(store_error)?
        .ok_or_else(|| ResourceError::not_found(format!("no product has id {id}")))
}

impl Resource for Products {
    type Record = Product;
    type Id = ProductId;

    fn name(&self) -> &str {
        "product"
    }

    fn description(&self) -> &str {
        "A product is one catalog entry: SKU, name, price in cents and units in stock."
    }
}

impl Get for Products {
    async fn get(&self, id: ProductId, _: &ToolContext) -> Result<Product, ResourceError> {
        self.with_connection(move |connection| find(connection, id.get()))
            .await
    }
}

impl Search for Products {
    type Query = ProductQuery;

    async fn search(
        &self,
        query: ProductQuery,
        limit: usize,
        _: &ToolContext,
    ) -> Result<Vec<Product>, ResourceError> {
        // `%` and `_` in the text are literal, not wildcards.
        let pattern = query.text.map(|text| {
            let escaped = text
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_connection(move |connection| {
            let mut statement = connection
                .prepare(&format!(
                    "{SELECT} WHERE (?1 IS NULL OR name LIKE ?1 ESCAPE '\\' OR sku LIKE ?1 \
                     ESCAPE '\\') AND (?2 IS NULL OR price_cents <= ?2) AND (?3 IS NULL OR \
                     (?3 = 1 AND stock > 0) OR (?3 = 0 AND stock = 0)) ORDER BY id LIMIT ?4"
                ))
                .map_err(store_error)?;
            let rows = statement
                .query_map(
                    params![pattern, query.max_price_cents, query.in_stock, limit],
                    read_product,
                )
                .map_err(store_error)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(store_error)
        })
        .await
    }
}

impl Create for Products {
    type New = NewProduct;

    async fn create(&self, new: NewProduct, _: &ToolContext) -> Result<Product, ResourceError> {
        check_sku(&new.sku)?;
        check_name(&new.name)?;
        check_amount("price_cents", new.price_cents)?;
        let stock = new.stock.unwrap_or(0);
        check_amount("stock", stock)?;
        self.with_connection(move |connection| {
            let id = connection
                .query_row(
                    "INSERT INTO products (sku, name, price_cents, stock) VALUES (?1, ?2, ?3, ?4) \
                     RETURNING id",
                    params![new.sku, new.name, new.price_cents, stock],
                    |row| row.get(0),
                )
                .map_err(|error| write_error(error, Some(&new.sku)))?;
            Ok(Product {
                id,
                sku: new.sku,
                name: new.name,
                price_cents: new.price_cents,
                stock,
            })
        })
        .await
    }
}

impl Update for Products {
    type Patch = ProductPatch;

    async fn update(
        &self,
        id: ProductId,
        patch: ProductPatch,
        _: &ToolContext,
    ) -> Result<Product, ResourceError> {
        if let Some(sku) = &patch.sku {
            check_sku(sku)?;
        }
        if let Some(name) = &patch.name {
            check_name(name)?;
        }
        if let Some(price) = patch.price_cents {
            check_amount("price_cents", price)?;
        }
        if let Some(stock) = patch.stock {
            check_amount("stock", stock)?;
        }
        self.with_connection(move |connection| {
            // Immediate: the read and the write below are one step no other writer can split.
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(store_error)?;
            let mut product = find(&transaction, id.get())?;
            if let Some(sku) = patch.sku {
                product.sku = sku;
            }
            if let Some(name) = patch.name {
                product.name = name;
            }
            if let Some(price) = patch.price_cents {
                product.price_cents = price;
            }
            if let Some(stock) = patch.stock {
                product.stock = stock;
            }
            transaction
                .execute(
                    "UPDATE products SET sku = ?2, name = ?3, price_cents = ?4, stock = ?5 \
                     WHERE id = ?1",
                    params![
                        product.id,
                        product.sku,
                        product.name,
                        product.price_cents,
                        product.stock
                    ],
                )
                .map_err(|error| write_error(error, Some(&product.sku)))?;
            transaction.commit().map_err(store_error)?;
            Ok(product)
        })
        .await
    }
}

impl Delete for Products {
    async fn delete(&self, id: ProductId, _: &ToolContext) -> Result<(), ResourceError> {
        self.with_connection(move |connection| {
            let deleted = connection
                .execute("DELETE FROM products WHERE id = ?1", [id.get()])
                .map_err(store_error)?;
            if deleted == 0 {
                return Err(ResourceError::not_found(format!(
                    "no product has id {}",
                    id.get()
                )));
            }
            Ok(())
        })
        .await
    }
}

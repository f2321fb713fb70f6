//! A logical dump of the whole database and its restore, for `httpdns backup` / `restore`.
//!
//! The dump does not list tables by hand: it reads the schema from the database's catalog, so a
//! table added by a later migration is backed up without anyone remembering to. Every column
//! type the migrations use maps to a [`ColumnType`]; a column of any other type stops the
//! dump with its name rather than being skipped.
//!
//! # Format
//!
//! JSON lines. The first line is a [`DumpHeader`] (the applied migrations and every table's
//! columns); every further line is one row, `{"table": "...", "row": [values in column
//! order]}`, values typed by their column: integers and booleans as JSON numbers and booleans,
//! doubles as strings of their shortest exact form (`"0.1"`, `"1e-300"`, `"NaN"`), text as
//! strings, blobs as base64, NULL as null.
//!
//! # Guarantees
//!
//! * The dump reads every table inside one read-only transaction (PostgreSQL: REPEATABLE READ;
//!   SQLite: one read transaction over the WAL), so it is one point in time while writers run.
//! * The restore is one transaction: it checks the database is empty (unless forced), deletes
//!   what is there (forced), inserts every row and commits; any error rolls all of it back.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use base64::Engine as _;
use futures_util::TryStreamExt as _;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::resources::Backend;
use crate::{Store, StoreError};

/// Version of the dump format.
pub const DUMP_FORMAT: u32 = 1;

/// The table sqlx keeps its migration history in: recreated by migrating, never dumped.
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// How a column's values are read, written and represented in the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    Integer,
    Real,
    Text,
    Bool,
    Blob,
}

impl ColumnType {
    /// The type of a column declared as `declared` (SQLite's declared type or PostgreSQL's
    /// `information_schema.columns.data_type`).
    fn of(declared: &str) -> Option<Self> {
        let t = declared.to_ascii_uppercase();
        Some(if t.contains("INT") {
            ColumnType::Integer
        } else if t.contains("CHAR") || t.contains("TEXT") || t.contains("CLOB") {
            ColumnType::Text
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            ColumnType::Real
        } else if t.contains("BOOL") {
            ColumnType::Bool
        } else if t.contains("BLOB") || t.contains("BYTEA") {
            ColumnType::Blob
        } else {
            return None;
        })
    }
}

/// One table of the dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub name: String,
    pub columns: Vec<(String, ColumnType)>,
}

/// The first line of a dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpHeader {
    pub format: u32,
    /// `sqlite` or `postgres`: where the dump was taken (a dump restores into either).
    pub backend: String,
    /// Versions of the migrations applied to the dumped database.
    pub migrations: Vec<i64>,
    pub tables: Vec<TableSchema>,
}

/// What a dump or restore wrote: rows per table and the store revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpSummary {
    pub rows: BTreeMap<String, u64>,
    /// `store_meta.revision` of the dumped (or restored) data.
    pub revision: i64,
    pub migrations: Vec<i64>,
}

#[derive(Serialize, Deserialize)]
struct RowLine {
    table: String,
    row: Vec<serde_json::Value>,
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::Backup(message.into())
}

/// `"name"`, quoted for both backends. Every identifier put into dynamic SQL here comes from
/// the database's own catalog (and, on restore, is checked against it first), and is quoted.
fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The select expression of a column: integers and booleans read as BIGINT and reals as
/// DOUBLE PRECISION, so one decoding serves both backends whatever the declared width.
fn select_expr(name: &str, ty: ColumnType) -> String {
    let c = quote(name);
    match ty {
        ColumnType::Integer => format!("CAST({c} AS BIGINT)"),
        ColumnType::Real => format!("CAST({c} AS DOUBLE PRECISION)"),
        ColumnType::Bool => {
            format!("CAST(CASE WHEN {c} IS NULL THEN NULL WHEN {c} THEN 1 ELSE 0 END AS BIGINT)")
        }
        ColumnType::Text | ColumnType::Blob => c,
    }
}

/// A double as text: Rust's shortest representation that parses back to the same bits
/// (`NaN`, `inf`, `-inf` included). A JSON number would not do: serde_json's default number
/// parser may land one unit in the last place away.
fn real_to_json(v: f64) -> serde_json::Value {
    format!("{v:?}").into()
}

fn decode(row: &sqlx::any::AnyRow, i: usize, ty: ColumnType) -> Result<serde_json::Value, StoreError> {
    use serde_json::Value;
    Ok(match ty {
        ColumnType::Integer => row.try_get::<Option<i64>, _>(i)?.map_or(Value::Null, Value::from),
        ColumnType::Bool => row.try_get::<Option<i64>, _>(i)?.map_or(Value::Null, |v| Value::Bool(v != 0)),
        ColumnType::Real => row.try_get::<Option<f64>, _>(i)?.map_or(Value::Null, real_to_json),
        ColumnType::Text => row.try_get::<Option<String>, _>(i)?.map_or(Value::Null, Value::from),
        ColumnType::Blob => row
            .try_get::<Option<Vec<u8>>, _>(i)?
            .map_or(Value::Null, |b| base64::engine::general_purpose::STANDARD.encode(b).into()),
    })
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

fn bind<'q>(
    q: AnyQuery<'q>,
    table: &str,
    column: &str,
    ty: ColumnType,
    v: &serde_json::Value,
) -> Result<AnyQuery<'q>, StoreError> {
    use serde_json::Value;
    let wrong = || bad(format!("{table}.{column}: {v} is not a {ty:?} value"));
    Ok(match (ty, v) {
        (ColumnType::Integer, Value::Null) => q.bind(None::<i64>),
        (ColumnType::Real, Value::Null) => q.bind(None::<f64>),
        (ColumnType::Text, Value::Null) => q.bind(None::<String>),
        (ColumnType::Bool, Value::Null) => q.bind(None::<bool>),
        (ColumnType::Blob, Value::Null) => q.bind(None::<Vec<u8>>),
        (ColumnType::Integer, Value::Number(n)) => q.bind(n.as_i64().ok_or_else(wrong)?),
        (ColumnType::Real, Value::String(s)) => q.bind(s.parse::<f64>().map_err(|_| wrong())?),
        (ColumnType::Text, Value::String(s)) => q.bind(s.clone()),
        (ColumnType::Bool, Value::Bool(b)) => q.bind(*b),
        (ColumnType::Blob, Value::String(s)) => {
            q.bind(base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| wrong())?)
        }
        _ => return Err(wrong()),
    })
}

impl Store {
    /// The tables of the schema (sqlx's migration history excepted) with their columns, by name.
    async fn tables(&self, conn: &mut sqlx::AnyConnection) -> Result<Vec<TableSchema>, StoreError> {
        let (list, columns) = match self.backend {
            Backend::Sqlite => (
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
                "SELECT name, type FROM pragma_table_info($1) ORDER BY cid",
            ),
            Backend::Postgres => (
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name",
                "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT) FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND CAST(table_name AS TEXT) = $1 ORDER BY ordinal_position",
            ),
        };
        let names: Vec<String> = sqlx::query(list)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<String, _>(0))
            .collect::<Result<_, _>>()?;
        let mut tables = Vec::new();
        for name in names.into_iter().filter(|n| n != MIGRATIONS_TABLE) {
            let mut cols = Vec::new();
            for r in sqlx::query(columns).bind(&name).fetch_all(&mut *conn).await? {
                let (col, declared): (String, String) = (r.try_get(0)?, r.try_get(1)?);
                let ty = ColumnType::of(&declared).ok_or_else(|| {
                    bad(format!(
                        "{name}.{col} has type {declared:?}, which backups do not know: teach ColumnType"
                    ))
                })?;
                cols.push((col, ty));
            }
            tables.push(TableSchema { name, columns: cols });
        }
        Ok(tables)
    }

    async fn applied_migrations(&self, conn: &mut sqlx::AnyConnection) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *conn)
            .await?;
        rows.iter().map(|r| r.try_get::<i64, _>(0).map_err(Into::into)).collect()
    }

    /// Writes the whole database to `out` (see the module docs), as of one point in time.
    pub async fn dump(&self, out: &mut dyn Write) -> Result<DumpSummary, StoreError> {
        let io = |e: std::io::Error| bad(format!("writing the dump: {e}"));
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        let migrations = self.applied_migrations(&mut tx).await?;
        let tables = self.tables(&mut tx).await?;
        let header = DumpHeader {
            format: DUMP_FORMAT,
            backend: self.backend_name().to_owned(),
            migrations: migrations.clone(),
            tables: tables.clone(),
        };
        serde_json::to_writer(&mut *out, &header).map_err(|e| bad(e.to_string()))?;
        out.write_all(b"\n").map_err(io)?;
        let mut summary = DumpSummary { migrations, ..DumpSummary::default() };
        for t in &tables {
            let exprs: Vec<String> = t.columns.iter().map(|(c, ty)| select_expr(c, *ty)).collect();
            // Ordered by every column, so two dumps of the same data are the same bytes.
            let order: Vec<String> = (1..=t.columns.len()).map(|i| i.to_string()).collect();
            let sql =
                format!("SELECT {} FROM {} ORDER BY {}", exprs.join(", "), quote(&t.name), order.join(", "));
            let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut *tx);
            let mut count = 0u64;
            while let Some(row) = rows.try_next().await? {
                let values = t
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, (_, ty))| decode(&row, i, *ty))
                    .collect::<Result<_, _>>()?;
                serde_json::to_writer(&mut *out, &RowLine { table: t.name.clone(), row: values })
                    .map_err(|e| bad(e.to_string()))?;
                out.write_all(b"\n").map_err(io)?;
                count += 1;
            }
            drop(rows);
            summary.rows.insert(t.name.clone(), count);
        }
        summary.revision = sqlx::query("SELECT revision FROM store_meta WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?
            .try_get::<i64, _>(0)?;
        tx.commit().await?;
        out.flush().map_err(io)?;
        Ok(summary)
    }

    /// Whether the database holds nothing but what migrating an empty one leaves: revision 0
    /// and no rows in any table but the counters (`store_meta`, `audit_meta`) at 0. Returns the
    /// tables that have rows.
    pub async fn non_empty_tables(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        self.non_empty_in(&mut conn).await
    }

    async fn non_empty_in(&self, conn: &mut sqlx::AnyConnection) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        for t in self.tables(&mut *conn).await? {
            // The counter rows a migration inserts count only once they have counted.
            let sql = match t.name.as_str() {
                "store_meta" => "SELECT COUNT(*) FROM store_meta WHERE revision <> 0".to_owned(),
                "audit_meta" => "SELECT COUNT(*) FROM audit_meta WHERE seq <> 0".to_owned(),
                _ => format!("SELECT COUNT(*) FROM {}", quote(&t.name)),
            };
            let n: i64 = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_one(&mut *conn).await?.try_get(0)?;
            if n > 0 {
                found.push(t.name);
            }
        }
        Ok(found)
    }

    /// Reads the header of a dump and checks that it restores into this database: the format
    /// is known, no migration of the dump is unknown here (a dump of a newer schema), and
    /// every dumped column exists with the same type.
    pub async fn check_dump(&self, header: &DumpHeader) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        self.check_dump_in(&mut conn, header).await.map(|_| ())
    }

    async fn check_dump_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        header: &DumpHeader,
    ) -> Result<Vec<TableSchema>, StoreError> {
        if header.format != DUMP_FORMAT {
            return Err(bad(format!("dump format {} is not {DUMP_FORMAT}", header.format)));
        }
        let here = self.applied_migrations(&mut *conn).await?;
        if let Some(v) = header.migrations.iter().find(|v| !here.contains(v)) {
            return Err(bad(format!(
                "the dump has migration {v}, which this binary does not: restore with a release at least as new as the one that made it"
            )));
        }
        let tables = self.tables(&mut *conn).await?;
        for t in &header.tables {
            let Some(target) = tables.iter().find(|x| x.name == t.name) else {
                return Err(bad(format!("table {} of the dump does not exist here", t.name)));
            };
            for (c, ty) in &t.columns {
                match target.columns.iter().find(|(n, _)| n == c) {
                    Some((_, here)) if here == ty => {}
                    Some((_, here)) => {
                        return Err(bad(format!("{}.{c} is {ty:?} in the dump but {here:?} here", t.name)))
                    }
                    None => {
                        return Err(bad(format!("column {}.{c} of the dump does not exist here", t.name)))
                    }
                }
            }
        }
        Ok(tables)
    }

    /// Restores a dump in one transaction. Refuses a database that is not empty (see
    /// [`Store::non_empty_tables`]) unless `force`, which replaces its content. Nothing is
    /// written unless every line parses and inserts.
    pub async fn restore_dump(
        &self,
        input: &mut dyn BufRead,
        force: bool,
    ) -> Result<DumpSummary, StoreError> {
        let mut lines = input.lines();
        let io = |e: std::io::Error| bad(format!("reading the dump: {e}"));
        let first = lines.next().ok_or_else(|| bad("the dump is empty"))?.map_err(io)?;
        let header: DumpHeader =
            serde_json::from_str(&first).map_err(|e| bad(format!("the dump's header: {e}")))?;
        let schemas: BTreeMap<&str, &TableSchema> =
            header.tables.iter().map(|t| (t.name.as_str(), t)).collect();

        let mut tx = self.pool.begin().await?;
        let target = self.check_dump_in(&mut tx, &header).await?;
        let non_empty = self.non_empty_in(&mut tx).await?;
        if !non_empty.is_empty() && !force {
            return Err(StoreError::NotEmpty(non_empty));
        }
        for t in &target {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {}", quote(&t.name))))
                .execute(&mut *tx)
                .await?;
        }
        let inserts: BTreeMap<&str, String> = header
            .tables
            .iter()
            .map(|t| {
                let cols: Vec<String> = t.columns.iter().map(|(c, _)| quote(c)).collect();
                let params: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
                let sql = format!(
                    "INSERT INTO {} ({}) VALUES ({})",
                    quote(&t.name),
                    cols.join(", "),
                    params.join(", ")
                );
                (t.name.as_str(), sql)
            })
            .collect();
        let mut summary = DumpSummary { migrations: header.migrations.clone(), ..DumpSummary::default() };
        for t in &header.tables {
            summary.rows.insert(t.name.clone(), 0);
        }
        for (n, line) in lines.enumerate() {
            let line = line.map_err(io)?;
            let RowLine { table, row } =
                serde_json::from_str(&line).map_err(|e| bad(format!("line {} of the dump: {e}", n + 2)))?;
            let schema =
                schemas.get(table.as_str()).ok_or_else(|| bad(format!("row of unknown table {table}")))?;
            if row.len() != schema.columns.len() {
                return Err(bad(format!(
                    "line {}: {} values for {} columns of {table}",
                    n + 2,
                    row.len(),
                    schema.columns.len()
                )));
            }
            let mut q = sqlx::query(sqlx::AssertSqlSafe(inserts[table.as_str()].clone()));
            for ((c, ty), v) in schema.columns.iter().zip(&row) {
                q = bind(q, &table, c, *ty, v)?;
            }
            q.execute(&mut *tx).await?;
            *summary.rows.get_mut(&table).expect("every table counted") += 1;
        }
        summary.revision = sqlx::query("SELECT revision FROM store_meta WHERE id = 1")
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get::<i64, _>(0))
            .transpose()?
            .ok_or_else(|| bad("the dump has no store_meta row"))?;
        tx.commit().await?;
        Ok(summary)
    }
}

/// Parses the header line of a dump.
pub fn read_header(first_line: &str) -> Result<DumpHeader, StoreError> {
    serde_json::from_str(first_line).map_err(|e| bad(format!("the dump's header: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_map_or_refuse() {
        assert_eq!(ColumnType::of("BIGINT"), Some(ColumnType::Integer));
        assert_eq!(ColumnType::of("integer"), Some(ColumnType::Integer));
        assert_eq!(ColumnType::of("double precision"), Some(ColumnType::Real));
        assert_eq!(ColumnType::of("TEXT"), Some(ColumnType::Text));
        assert_eq!(ColumnType::of("character varying"), Some(ColumnType::Text));
        assert_eq!(ColumnType::of("boolean"), Some(ColumnType::Bool));
        assert_eq!(ColumnType::of("bytea"), Some(ColumnType::Blob));
        assert_eq!(ColumnType::of("jsonb"), None);
    }
}

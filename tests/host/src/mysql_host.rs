//! `fermyon:spin/mysql@2.0.0` against a real MySQL/MariaDB, mirroring Spin's
//! outbound MySQL: every `open` builds a new `mysql_async` pool and takes one
//! connection from it; `query` runs a prepared statement and returns only the
//! first result set; `execute` runs it through `exec_batch` and returns no
//! row count. Column types, value conversions and error variants (including
//! their `Debug`-formatted texts) follow Spin, using the same `mysql_async`
//! line.

use std::sync::atomic::Ordering;

use anyhow::anyhow;
use futures_util::TryStreamExt as _;
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::{FromValue, Queryable as _};
use mysql_async::{from_value_opt, Conn, Opts, OptsBuilder, Params, SslOpts};
use url::Url;
use wasmtime::component::Resource;

use crate::bindings::fermyon::spin::mysql::{Host, HostConnection};
use crate::bindings::fermyon::spin::rdbms_types::{
    self, Column, DbDataType, DbValue, Error, ParameterValue, RowSet,
};
use crate::instance::SpinHost;

/// The host side of a guest's `connection` resource.
pub struct MysqlConnection(Conn);

/// Host results: the outer `Err` traps, the inner one goes to the guest.
type HostResult<T> = anyhow::Result<Result<T, Error>>;

impl Host for SpinHost {}
impl rdbms_types::Host for SpinHost {}

impl SpinHost {
    fn mysql(&mut self, conn: &Resource<MysqlConnection>) -> anyhow::Result<&mut Conn> {
        Ok(&mut self.table.get_mut(conn)?.0)
    }
}

impl HostConnection for SpinHost {
    async fn open(&mut self, address: String) -> HostResult<Resource<MysqlConnection>> {
        if self.faults.trap_on_mysql_open.load(Ordering::SeqCst) {
            self.faults.injected_traps.fetch_add(1, Ordering::SeqCst);
            return Err(anyhow!(
                "test-host fault injection: trap_on_mysql_open is set, killing the instance"
            ));
        }
        if !self.component.allowed_hosts.allows(&address, "mysql") {
            return Ok(Err(Error::ConnectionFailed(format!(
                "address {address} is not permitted"
            ))));
        }
        match connect(&address).await {
            Ok(conn) => Ok(Ok(self.table.push(MysqlConnection(conn))?)),
            Err(e) => Ok(Err(Error::ConnectionFailed(format!("{e:?}")))),
        }
    }

    async fn query(
        &mut self,
        conn: Resource<MysqlConnection>,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> HostResult<RowSet> {
        let conn = self.mysql(&conn)?;
        Ok(query(conn, &statement, params).await)
    }

    async fn execute(
        &mut self,
        conn: Resource<MysqlConnection>,
        statement: String,
        params: Vec<ParameterValue>,
    ) -> HostResult<()> {
        let conn = self.mysql(&conn)?;
        let params = [to_params(params)];
        Ok(conn
            .exec_batch(statement.as_str(), &params)
            .await
            .map_err(|e| Error::QueryFailed(format!("{e:?}"))))
    }

    async fn drop(&mut self, conn: Resource<MysqlConnection>) -> anyhow::Result<()> {
        self.table.delete(conn)?;
        Ok(())
    }
}

/// A fresh pool per open, one connection taken from it: what Spin does.
async fn connect(address: &str) -> anyhow::Result<Conn> {
    let opts = build_opts(address)?;
    // Built without TLS, `mysql_async` would panic when asked for it.
    anyhow::ensure!(
        opts.ssl_opts().is_none(),
        "TLS (ssl-mode other than DISABLED) is not supported by the test host"
    );
    let pool = mysql_async::Pool::new(opts);
    Ok(pool.get_conn().await?)
}

/// `mysql_async` rejects `ssl-mode` in a URL, so, like Spin, strip it and
/// turn anything but `DISABLED` into TLS options.
fn build_opts(address: &str) -> Result<Opts, mysql_async::Error> {
    let mut url = Url::parse(address)?;
    let is_ssl_key = |k: &str| ["ssl-mode", "sslmode"].contains(&k.to_lowercase().as_str());
    let use_ssl = url
        .query_pairs()
        .any(|(k, v)| is_ssl_key(&k) && !v.eq_ignore_ascii_case("disabled"));
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !is_ssl_key(k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.set_query(None);
    url.query_pairs_mut().extend_pairs(kept);
    let opts = Opts::from_url(url.as_str())?;
    Ok(OptsBuilder::from_opts(opts)
        .ssl_opts(use_ssl.then(SslOpts::default))
        .into())
}

async fn query(
    conn: &mut Conn,
    statement: &str,
    params: Vec<ParameterValue>,
) -> Result<RowSet, Error> {
    let mut result = conn
        .exec_iter(statement, to_params(params))
        .await
        .map_err(|e| Error::QueryFailed(format!("{e:?}")))?;
    let columns: Vec<Column> = result
        .columns()
        .map(|cols| cols.iter().map(to_column).collect())
        .unwrap_or_default();
    // Only the first result set is read; a statement without one (e.g. an
    // UPDATE sent through `query`) is an error, as in Spin.
    let mut stream = result
        .stream::<mysql_async::Row>()
        .await
        .map_err(|e| Error::Other(e.to_string()))?
        .ok_or_else(|| Error::Other("unable to stream query result".into()))?;
    let mut rows = Vec::new();
    while let Some(row) = stream
        .try_next()
        .await
        .map_err(|e| Error::Other(e.to_string()))?
    {
        rows.push(to_row(row, &columns)?);
    }
    Ok(RowSet { columns, rows })
}

fn to_params(params: Vec<ParameterValue>) -> Params {
    use mysql_async::Value;
    Params::Positional(
        params
            .into_iter()
            .map(|p| match p {
                ParameterValue::Boolean(v) => Value::from(v),
                ParameterValue::Int8(v) => Value::from(v),
                ParameterValue::Int16(v) => Value::from(v),
                ParameterValue::Int32(v) => Value::from(v),
                ParameterValue::Int64(v) => Value::from(v),
                ParameterValue::Uint8(v) => Value::from(v),
                ParameterValue::Uint16(v) => Value::from(v),
                ParameterValue::Uint32(v) => Value::from(v),
                ParameterValue::Uint64(v) => Value::from(v),
                ParameterValue::Floating32(v) => Value::from(v),
                ParameterValue::Floating64(v) => Value::from(v),
                ParameterValue::Str(v) => Value::from(v),
                ParameterValue::Binary(v) => Value::from(v),
                ParameterValue::DbNull => Value::NULL,
            })
            .collect(),
    )
}

fn to_column(column: &mysql_async::Column) -> Column {
    Column {
        name: column.name_str().into_owned(),
        data_type: data_type(column.column_type(), column.flags()),
    }
}

/// Spin's column mapping: integers by width and signedness, floats, text and
/// binary strings; everything else (DECIMAL, DATETIME, JSON, ...) is `other`,
/// whose values then fail to convert.
fn data_type(ty: ColumnType, flags: ColumnFlags) -> DbDataType {
    use ColumnType::*;
    let signed = !flags.contains(ColumnFlags::UNSIGNED_FLAG);
    let binary = flags.contains(ColumnFlags::BINARY_FLAG);
    if ty.is_numeric_type() {
        match (ty, signed) {
            (MYSQL_TYPE_DOUBLE, _) => DbDataType::Floating64,
            (MYSQL_TYPE_FLOAT, _) => DbDataType::Floating32,
            (MYSQL_TYPE_INT24 | MYSQL_TYPE_LONG, true) => DbDataType::Int32,
            (MYSQL_TYPE_INT24 | MYSQL_TYPE_LONG, false) => DbDataType::Uint32,
            (MYSQL_TYPE_LONGLONG, true) => DbDataType::Int64,
            (MYSQL_TYPE_LONGLONG, false) => DbDataType::Uint64,
            (MYSQL_TYPE_SHORT, true) => DbDataType::Int16,
            (MYSQL_TYPE_SHORT, false) => DbDataType::Uint16,
            (MYSQL_TYPE_TINY, true) => DbDataType::Int8,
            (MYSQL_TYPE_TINY, false) => DbDataType::Uint8,
            _ => DbDataType::Other,
        }
    } else if ty.is_character_type() {
        match (ty, binary) {
            (MYSQL_TYPE_BLOB, false) => DbDataType::Str,
            (MYSQL_TYPE_BLOB | MYSQL_TYPE_LONG_BLOB | MYSQL_TYPE_MEDIUM_BLOB, _) => {
                DbDataType::Binary
            }
            (MYSQL_TYPE_STRING | MYSQL_TYPE_VAR_STRING, true) => DbDataType::Binary,
            (MYSQL_TYPE_STRING | MYSQL_TYPE_VAR_STRING, false) => DbDataType::Str,
            _ => DbDataType::Other,
        }
    } else {
        DbDataType::Other
    }
}

fn to_row(mut row: mysql_async::Row, columns: &[Column]) -> Result<Vec<DbValue>, Error> {
    (0..row.len())
        .map(|i| match (row.take(i), columns.get(i)) {
            (None, _) => Ok(DbValue::DbNull),
            (_, None) => Err(Error::Other(format!("Can't get column at index {i}"))),
            (Some(mysql_async::Value::NULL), _) => Ok(DbValue::DbNull),
            (Some(value), Some(column)) => to_value(value, column),
        })
        .collect()
}

fn to_value(value: mysql_async::Value, column: &Column) -> Result<DbValue, Error> {
    fn conv<T: FromValue>(value: mysql_async::Value) -> Result<T, Error> {
        from_value_opt(value).map_err(|e| Error::ValueConversionFailed(e.to_string()))
    }
    Ok(match column.data_type {
        DbDataType::Boolean => DbValue::Boolean(conv(value)?),
        DbDataType::Int8 => DbValue::Int8(conv(value)?),
        DbDataType::Int16 => DbValue::Int16(conv(value)?),
        DbDataType::Int32 => DbValue::Int32(conv(value)?),
        DbDataType::Int64 => DbValue::Int64(conv(value)?),
        DbDataType::Uint8 => DbValue::Uint8(conv(value)?),
        DbDataType::Uint16 => DbValue::Uint16(conv(value)?),
        DbDataType::Uint32 => DbValue::Uint32(conv(value)?),
        DbDataType::Uint64 => DbValue::Uint64(conv(value)?),
        DbDataType::Floating32 => DbValue::Floating32(conv(value)?),
        DbDataType::Floating64 => DbValue::Floating64(conv(value)?),
        DbDataType::Str => DbValue::Str(conv(value)?),
        DbDataType::Binary => DbValue::Binary(conv(value)?),
        DbDataType::Other => {
            return Err(Error::ValueConversionFailed(format!(
                "Cannot convert value {value:?} in column {} data type {:?}",
                column.name, column.data_type
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_map_like_spin() {
        let none = ColumnFlags::empty();
        let unsigned = ColumnFlags::UNSIGNED_FLAG;
        let binary = ColumnFlags::BINARY_FLAG;
        let cases = [
            (ColumnType::MYSQL_TYPE_LONGLONG, none, DbDataType::Int64),
            (
                ColumnType::MYSQL_TYPE_LONGLONG,
                unsigned,
                DbDataType::Uint64,
            ),
            (ColumnType::MYSQL_TYPE_LONG, none, DbDataType::Int32),
            (ColumnType::MYSQL_TYPE_TINY, none, DbDataType::Int8),
            (ColumnType::MYSQL_TYPE_TINY, unsigned, DbDataType::Uint8),
            (ColumnType::MYSQL_TYPE_DOUBLE, none, DbDataType::Floating64),
            (ColumnType::MYSQL_TYPE_VAR_STRING, none, DbDataType::Str),
            (
                ColumnType::MYSQL_TYPE_VAR_STRING,
                binary,
                DbDataType::Binary,
            ),
            (ColumnType::MYSQL_TYPE_BLOB, none, DbDataType::Str),
            (ColumnType::MYSQL_TYPE_BLOB, binary, DbDataType::Binary),
            (ColumnType::MYSQL_TYPE_NEWDECIMAL, none, DbDataType::Other),
            (ColumnType::MYSQL_TYPE_DATETIME, binary, DbDataType::Other),
            (ColumnType::MYSQL_TYPE_TIMESTAMP, binary, DbDataType::Other),
        ];
        for (ty, flags, expected) in cases {
            assert_eq!(data_type(ty, flags), expected, "{ty:?} {flags:?}");
        }
    }

    #[test]
    fn other_columns_fail_conversion() {
        let column = Column {
            name: "price".into(),
            data_type: DbDataType::Other,
        };
        let err = to_value(mysql_async::Value::Bytes(b"12.50".to_vec()), &column).unwrap_err();
        assert!(
            matches!(&err, Error::ValueConversionFailed(m) if m.contains("column price")),
            "{err:?}"
        );
    }

    #[test]
    fn ssl_mode_is_stripped_from_the_url() {
        let opts = build_opts("mysql://u:p@127.0.0.1:3306/db?ssl-mode=DISABLED").unwrap();
        assert!(opts.ssl_opts().is_none());
        assert_eq!(opts.db_name(), Some("db"));
        let opts = build_opts("mysql://u:p@127.0.0.1/db?SslMode=REQUIRED&pool_max=20").unwrap();
        assert!(opts.ssl_opts().is_some());
        assert_eq!(opts.pool_opts().constraints().max(), 20);
    }
}

//! Every MySQL statement the component runs. The writes that must be atomic are stored
//! procedures in `migrations/002_procedures.sql`: Spin's MySQL API prepares every
//! statement (no START TRANSACTION) and opens a new connection per request, so one
//! CALL per write is both atomic and a single round trip.

use chrono::{DateTime, Utc};
use spin_sdk::mysql::{self, Connection, DbValue, ParameterValue};

use seckill_core::verdict::{batch_json, Committed, Verdict, COMMIT_BATCH};
use seckill_core::{OrderId, UserId, VoucherId};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("mysql: {0}")]
    Mysql(#[from] mysql::MysqlError),
    #[error("mysql: unexpected result: {0}")]
    Result(String),
}

/// A voucher as stored: `tb_voucher` joined with `tb_seckill_voucher`.
#[derive(Debug, Clone, PartialEq)]
pub struct VoucherRow {
    pub id: VoucherId,
    pub title: String,
    pub description: String,
    pub initial_stock: u64,
    pub stock: u64,
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

#[derive(Debug)]
pub struct NewVoucherRow<'a> {
    pub title: &'a str,
    pub description: &'a str,
    pub stock: u64,
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OrderRow {
    pub id: OrderId,
    pub user_id: UserId,
    pub voucher_id: VoucherId,
    pub status: u8,
    pub created_at: DateTime<Utc>,
}

const CREATE_VOUCHER: &str = "CALL seckill_create_voucher(?, ?, ?, ?, ?)";
const DELETE_VOUCHER: &str = "DELETE FROM tb_voucher WHERE id = ?";
// DATETIME columns do not cross Spin's MySQL API (they map to an unsupported type), so
// times travel as whole seconds since 1970; the columns hold UTC.
const VOUCHER: &str = "SELECT v.id, v.title, v.description, s.initial_stock, s.stock, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.begin_time), \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.end_time) \
     FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?";
const ORDER: &str = "SELECT id, user_id, voucher_id, status, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', create_time) FROM tb_voucher_order WHERE id = ?";
const ORDER_OF: &str = "SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?";
const BUYERS_PAGE: &str = "SELECT user_id, id FROM tb_voucher_order \
     WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?";
const PING: &str = "SELECT 1";

pub struct Db {
    mysql: Connection,
}

impl Db {
    pub fn connect(url: &str) -> Result<Db, DbError> {
        Ok(Db {
            mysql: Connection::open(url)?,
        })
    }

    pub fn ping(&self) -> Result<(), DbError> {
        let rows = self.mysql.query(PING, &[])?.rows;
        match rows.as_slice() {
            [row] if int(row, 0)? == 1 => Ok(()),
            _ => Err(DbError::Result("SELECT 1 did not return 1".into())),
        }
    }

    /// Inserts the voucher and its sale terms in one transaction; returns the new id.
    pub fn create_voucher(&self, voucher: &NewVoucherRow) -> Result<VoucherId, DbError> {
        let params = [
            ParameterValue::Str(voucher.title.to_string()),
            ParameterValue::Str(voucher.description.to_string()),
            ParameterValue::Uint64(voucher.stock),
            datetime(voucher.begin),
            datetime(voucher.end),
        ];
        let rows = self.mysql.query(CREATE_VOUCHER, &params)?.rows;
        match rows.as_slice() {
            [row] => unsigned(row, 0).map(VoucherId::from_raw),
            _ => Err(DbError::Result(
                "seckill_create_voucher returned no id".into(),
            )),
        }
    }

    /// Removes a voucher (its sale terms go with it): undoes a creation that could not finish.
    pub fn delete_voucher(&self, id: VoucherId) -> Result<(), DbError> {
        self.mysql
            .execute(DELETE_VOUCHER, &[ParameterValue::Uint64(id.raw())])?;
        Ok(())
    }

    pub fn voucher(&self, id: VoucherId) -> Result<Option<VoucherRow>, DbError> {
        let rows = self
            .mysql
            .query(VOUCHER, &[ParameterValue::Uint64(id.raw())])?
            .rows;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(VoucherRow {
            id: VoucherId::from_raw(unsigned(row, 0)?),
            title: string(row, 1)?,
            description: string(row, 2)?,
            initial_stock: unsigned(row, 3)?,
            stock: unsigned(row, 4)?,
            begin: timestamp(row, 5)?,
            end: timestamp(row, 6)?,
        }))
    }

    /// Commits queued purchases `(order id, buyer)` of one voucher in one transaction
    /// (see `seckill_commit_batch`) and returns the verdict on each, in order, with the
    /// voucher's number of orders after it. Written again after a lost reply, a batch
    /// changes nothing and gets the same verdicts.
    pub fn commit_batch(
        &self,
        voucher_id: VoucherId,
        batch: &[(OrderId, UserId)],
    ) -> Result<Committed, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Str(batch_json(batch)),
        ];
        let rows = self.mysql.query(COMMIT_BATCH, &params)?.rows;
        if rows.len() != batch.len() {
            return Err(DbError::Result(format!(
                "seckill_commit_batch returned {} rows for {} purchases",
                rows.len(),
                batch.len()
            )));
        }
        let verdicts = rows
            .iter()
            .zip(batch)
            .map(|(row, (order_id, _))| {
                if unsigned(row, 0)? != order_id.raw() {
                    return Err(DbError::Result("seckill_commit_batch reordered".into()));
                }
                let held = match column(row, 1)? {
                    DbValue::DbNull => None,
                    _ => Some(OrderId::from_raw(unsigned(row, 1)?)),
                };
                Ok(Verdict::of(*order_id, held, int(row, 2)? != 0))
            })
            .collect::<Result<_, _>>()?;
        let orders = match rows.first() {
            Some(row) => unsigned(row, 3)?,
            None => 0,
        };
        Ok(Committed { verdicts, orders })
    }

    pub fn order(&self, id: OrderId) -> Result<Option<OrderRow>, DbError> {
        let rows = self
            .mysql
            .query(ORDER, &[ParameterValue::Uint64(id.raw())])?
            .rows;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(OrderRow {
            id: OrderId::from_raw(unsigned(row, 0)?),
            user_id: UserId::from_raw(unsigned(row, 1)?),
            voucher_id: VoucherId::from_raw(unsigned(row, 2)?),
            status: u8::try_from(unsigned(row, 3)?)
                .map_err(|_| DbError::Result("order status out of range".into()))?,
            created_at: timestamp(row, 4)?,
        }))
    }

    /// The buyer's order of the voucher, if she has one.
    pub fn order_of(
        &self,
        user: UserId,
        voucher_id: VoucherId,
    ) -> Result<Option<OrderId>, DbError> {
        let params = [
            ParameterValue::Uint64(user.raw()),
            ParameterValue::Uint64(voucher_id.raw()),
        ];
        let rows = self.mysql.query(ORDER_OF, &params)?.rows;
        rows.first()
            .map(|row| Ok(OrderId::from_raw(unsigned(row, 0)?)))
            .transpose()
    }

    /// The voucher's buyers in order id order, starting after `after`, for a sync.
    pub fn buyers_page(
        &self,
        voucher_id: VoucherId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<(UserId, OrderId)>, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Uint64(after.raw()),
            ParameterValue::Uint32(limit),
        ];
        let rows = self.mysql.query(BUYERS_PAGE, &params)?.rows;
        rows.iter()
            .map(|row| {
                Ok((
                    UserId::from_raw(unsigned(row, 0)?),
                    OrderId::from_raw(unsigned(row, 1)?),
                ))
            })
            .collect()
    }
}

fn datetime(at: DateTime<Utc>) -> ParameterValue {
    ParameterValue::Str(at.format("%Y-%m-%d %H:%M:%S").to_string())
}

fn column(row: &[DbValue], index: usize) -> Result<&DbValue, DbError> {
    row.get(index)
        .ok_or_else(|| DbError::Result(format!("missing column {index}")))
}

/// Integer columns arrive as whichever variant their SQL type maps to.
fn int(row: &[DbValue], index: usize) -> Result<i128, DbError> {
    Ok(match column(row, index)? {
        DbValue::Int8(v) => (*v).into(),
        DbValue::Int16(v) => (*v).into(),
        DbValue::Int32(v) => (*v).into(),
        DbValue::Int64(v) => (*v).into(),
        DbValue::Uint8(v) => (*v).into(),
        DbValue::Uint16(v) => (*v).into(),
        DbValue::Uint32(v) => (*v).into(),
        DbValue::Uint64(v) => (*v).into(),
        other => {
            return Err(DbError::Result(format!(
                "column {index}: {other:?} is not an integer"
            )))
        }
    })
}

fn unsigned(row: &[DbValue], index: usize) -> Result<u64, DbError> {
    u64::try_from(int(row, index)?)
        .map_err(|_| DbError::Result(format!("column {index} is negative")))
}

fn timestamp(row: &[DbValue], index: usize) -> Result<DateTime<Utc>, DbError> {
    i64::try_from(int(row, index)?)
        .ok()
        .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
        .ok_or_else(|| DbError::Result(format!("column {index} is not a time")))
}

fn string(row: &[DbValue], index: usize) -> Result<String, DbError> {
    match column(row, index)? {
        DbValue::Str(text) => Ok(text.clone()),
        DbValue::Binary(bytes) => String::from_utf8(bytes.clone())
            .map_err(|_| DbError::Result(format!("column {index} is not UTF-8"))),
        other => Err(DbError::Result(format!(
            "column {index}: {other:?} is not text"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_any_width_read_back() {
        let row = [
            DbValue::Uint32(7),
            DbValue::Int64(-1),
            DbValue::Uint64(u64::MAX),
            DbValue::DbNull,
        ];
        assert_eq!(unsigned(&row, 0).unwrap(), 7);
        assert!(unsigned(&row, 1).is_err());
        assert_eq!(unsigned(&row, 2).unwrap(), u64::MAX);
        assert!(int(&row, 3).is_err());
        assert!(int(&row, 4).is_err());
    }

    #[test]
    fn times_cross_as_utc_seconds() {
        let row = [DbValue::Int64(1_700_000_000)];
        assert_eq!(
            timestamp(&row, 0).unwrap().to_rfc3339(),
            "2023-11-14T22:13:20+00:00"
        );
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert!(matches!(datetime(at), ParameterValue::Str(s) if s == "2023-11-14 22:13:20"));
    }
}

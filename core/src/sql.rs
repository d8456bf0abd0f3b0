//! The MySQL statements whose rows the decisions read, and how to read them: the
//! component runs them through Spin's MySQL API, the tests through a client of their own,
//! and both hand the rows over as [`Value`]s, so there is one reader of each.
//!
//! Writes that must be atomic are stored procedures (`migrations/002_procedures.sql`):
//! Spin's MySQL API prepares every statement (no START TRANSACTION), so one CALL per
//! write is both atomic and a single round trip.

use crate::ids::{UserId, VoucherId};
use crate::order_id::OrderId;
use crate::sale::Terms;
use crate::verdict::{Committed, Verdict};

/// One column of a row, as either client hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i128),
    Text(String),
}

/// A row that does not read as the statement promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mysql: unexpected result: {0}")]
pub struct UnexpectedRow(pub String);

type Read<T> = Result<T, UnexpectedRow>;

/// A voucher's sale terms, by id. DATETIME columns do not cross Spin's MySQL API (they map
/// to an unsupported type), so times travel as whole seconds since 1970; the columns hold
/// UTC. Read by [`terms`].
pub const VOUCHER: &str = "SELECT s.stock, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.begin_time), \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.end_time), \
     s.initial_stock, v.title, v.description \
     FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?";

/// Creates a voucher and its sale terms in one transaction: title, description, stock,
/// begin and end (`YYYY-MM-DD HH:MM:SS`, UTC). Returns one row: the new id.
pub const CREATE_VOUCHER: &str = "CALL seckill_create_voucher(?, ?, ?, ?, ?)";

/// Removes a voucher (its sale terms go with it), by id.
pub const DELETE_VOUCHER: &str = "DELETE FROM tb_voucher WHERE id = ?";

/// The buyer's order of the voucher: user id, voucher id. Read by [`order_of`].
pub const ORDER_OF: &str = "SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?";

/// The highest voucher id handed out (one row, `NULL` when there is none). Read by
/// [`highest`].
pub const HIGHEST_VOUCHER: &str = "SELECT MAX(id) FROM tb_voucher";

/// A page of a voucher's buyers in order id order: voucher id, the order id after which
/// to start, and the page's size. Read by [`buyers`].
pub const BUYERS_PAGE: &str = "SELECT user_id, id FROM tb_voucher_order \
     WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?";

/// Commits a batch of one voucher's purchases in one transaction: the voucher's id, and
/// the batch as [`batch_json`]. Returns a row per purchase, in order: its order id, the
/// buyer's order of the voucher if any, whether any order has its id, and the voucher's
/// orders once the batch committed. Read by [`committed`].
pub const COMMIT_BATCH: &str = "CALL seckill_commit_batch(?, ?)";

/// The batch `(order id, buyer)` as [`COMMIT_BATCH`] takes it: a JSON array of
/// `["<order id>", "<user id>"]`, strings so that no id loses digits.
pub fn batch_json(batch: &[(OrderId, UserId)]) -> String {
    let pairs: Vec<[String; 2]> = batch
        .iter()
        .map(|(order_id, user)| [order_id.to_string(), user.to_string()])
        .collect();
    serde_json::to_string(&pairs).expect("strings encode")
}

/// [`VOUCHER`]'s row.
pub fn terms(row: &[Value]) -> Read<Terms> {
    Ok(Terms {
        stock: unsigned(row, 0)?,
        begin_ms: seconds(row, 1)? * 1000,
        end_ms: seconds(row, 2)? * 1000,
        initial_stock: unsigned(row, 3)?,
        title: text(row, 4)?,
        description: text(row, 5)?,
    })
}

/// [`HIGHEST_VOUCHER`]'s rows.
pub fn highest(rows: &[Vec<Value>]) -> Read<Option<VoucherId>> {
    match rows {
        [row] if column(row, 0)? == &Value::Null => Ok(None),
        [row] => Ok(Some(VoucherId::from_raw(unsigned(row, 0)?))),
        _ => Err(UnexpectedRow(format!("{} rows for MAX(id)", rows.len()))),
    }
}

/// [`ORDER_OF`]'s rows.
pub fn order_of(rows: &[Vec<Value>]) -> Read<Option<OrderId>> {
    rows.first()
        .map(|row| unsigned(row, 0).map(OrderId::from_raw))
        .transpose()
}

/// [`BUYERS_PAGE`]'s rows.
pub fn buyers(rows: &[Vec<Value>]) -> Read<Vec<(UserId, OrderId)>> {
    rows.iter()
        .map(|row| {
            Ok((
                UserId::from_raw(unsigned(row, 0)?),
                OrderId::from_raw(unsigned(row, 1)?),
            ))
        })
        .collect()
}

/// [`COMMIT_BATCH`]'s rows for `batch`: MySQL's verdict on each purchase, in order, with
/// the voucher's orders after it.
pub fn committed(batch: &[(OrderId, UserId)], rows: &[Vec<Value>]) -> Read<Committed> {
    if rows.len() != batch.len() {
        return Err(UnexpectedRow(format!(
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
                return Err(UnexpectedRow("seckill_commit_batch reordered".into()));
            }
            let held = match column(row, 1)? {
                Value::Null => None,
                _ => Some(OrderId::from_raw(unsigned(row, 1)?)),
            };
            Ok(Verdict::of(*order_id, held, int(row, 2)? != 0))
        })
        .collect::<Read<_>>()?;
    let orders = match rows.first() {
        Some(row) => unsigned(row, 3)?,
        None => 0,
    };
    Ok(Committed { verdicts, orders })
}

pub fn column(row: &[Value], index: usize) -> Read<&Value> {
    row.get(index)
        .ok_or_else(|| UnexpectedRow(format!("missing column {index}")))
}

pub fn int(row: &[Value], index: usize) -> Read<i128> {
    match column(row, index)? {
        Value::Int(n) => Ok(*n),
        // Some clients hand computed columns (MAX, TIMESTAMPDIFF) over as text.
        Value::Text(text) => text
            .parse()
            .map_err(|_| UnexpectedRow(format!("column {index}: {text:?} is not an integer"))),
        Value::Null => Err(UnexpectedRow(format!("column {index} is NULL"))),
    }
}

pub fn unsigned(row: &[Value], index: usize) -> Read<u64> {
    u64::try_from(int(row, index)?)
        .map_err(|_| UnexpectedRow(format!("column {index} is negative")))
}

fn seconds(row: &[Value], index: usize) -> Read<i64> {
    i64::try_from(int(row, index)?)
        .ok()
        .filter(|seconds| seconds.checked_mul(1000).is_some())
        .ok_or_else(|| UnexpectedRow(format!("column {index} is not a time")))
}

pub fn text(row: &[Value], index: usize) -> Read<String> {
    match column(row, index)? {
        Value::Text(text) => Ok(text.clone()),
        other => Err(UnexpectedRow(format!(
            "column {index}: {other:?} is not text"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_back_from_numbers_or_text() {
        let row = [
            Value::Int(7),
            Value::Int(-1),
            Value::Text("18446744073709551615".into()),
            Value::Null,
        ];
        assert_eq!(unsigned(&row, 0).unwrap(), 7);
        assert!(unsigned(&row, 1).is_err());
        assert_eq!(unsigned(&row, 2).unwrap(), u64::MAX);
        assert!(int(&row, 3).is_err());
        assert!(int(&row, 4).is_err());
    }

    #[test]
    fn a_batch_reads_as_one_verdict_a_purchase() {
        let (a, b) = (OrderId::from_raw(5), OrderId::from_raw(6));
        let user = UserId::from_raw(1);
        let batch = [(a, user), (b, user)];
        let rows = vec![
            vec![Value::Int(5), Value::Int(5), Value::Int(1), Value::Int(1)],
            vec![Value::Int(6), Value::Int(5), Value::Int(0), Value::Int(1)],
        ];
        let committed = committed(&batch, &rows).unwrap();
        assert_eq!(
            committed.verdicts,
            [Verdict::Ordered, Verdict::Duplicate(a)]
        );
        assert_eq!(committed.orders, 1);
        assert!(super::committed(&batch[..1], &rows).is_err());
        assert!(super::committed(&[(b, user), (a, user)], &rows).is_err());
    }

    #[test]
    fn terms_and_the_highest_id_read_back() {
        let row = [
            Value::Int(3),
            Value::Int(1_700_000_000),
            Value::Int(1_700_000_060),
            Value::Int(5),
            Value::Text("券".into()),
            Value::Text(String::new()),
        ];
        let terms = terms(&row).unwrap();
        assert_eq!((terms.stock, terms.initial_stock), (3, 5));
        assert_eq!(terms.end_ms - terms.begin_ms, 60_000);
        assert_eq!(highest(&[vec![Value::Null]]).unwrap(), None);
        assert_eq!(
            highest(&[vec![Value::Int(9)]]).unwrap(),
            Some(VoucherId::from_raw(9))
        );
    }
}

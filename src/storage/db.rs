//! MySQL through Spin's outbound MySQL API. The statements whose rows the tests read too,
//! with their readers, are `seckill_core::sql`; the component's own are here. The writes
//! that must be atomic are stored procedures in `migrations/999_procedures.sql`: Spin's
//! MySQL API prepares every statement (no START TRANSACTION) and opens a new connection
//! per request, so one CALL per write is both atomic and a single round trip.

use crate::error::Failure;
use crate::platform::mysql::{self, Connection, DbValue, ParameterValue};
use crate::platform::pause;
use crate::request_log;
use std::time::Duration;

use chrono::{DateTime, Utc};

use seckill_core::buckets::Buckets;
use seckill_core::error::UnexpectedRow;
use seckill_core::ledger::Returned;
use seckill_core::purchase::Lookup;
use seckill_core::sale::Record;
use seckill_core::sql::{self, Listed, SaleChange, Status, Value};
use seckill_core::verdict::{Committed, Committing};
use seckill_core::{BackendError, BucketId, OrderId, SaleId, UserId, VoucherId};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("mysql: {0}")]
    Mysql(#[from] mysql::Error),
    #[error(transparent)]
    Result(#[from] UnexpectedRow),
}

/// A MySQL call's failure as the state machines take it (`seckill_core::drive`).
impl From<DbError> for BackendError {
    fn from(error: DbError) -> BackendError {
        match error {
            DbError::Mysql(error) => BackendError::Mysql(error.to_string()),
            DbError::Result(unexpected) => BackendError::UnexpectedRow(unexpected),
        }
    }
}

/// A handler's MySQL call failed: its request answers `503`, naming MySQL.
impl From<DbError> for Failure {
    fn from(error: DbError) -> Failure {
        Failure::Backend(error.into())
    }
}

/// A sale's terms as a creation or a change writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVoucherRow {
    pub title: String,
    pub description: String,
    pub stock: u64,
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub pay_within_s: u64,
    /// Buckets the stock is spread over (docs/design.md, "Buckets").
    pub buckets: u64,
    /// The opening draw's window, milliseconds (0: none).
    pub draw_ms: u64,
    /// The most units one buyer may hold.
    pub per_buyer: u64,
    /// When the sale is listed (`None`: at its creation).
    pub announce: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OrderRow {
    pub id: OrderId,
    pub user_id: UserId,
    /// The voucher the storefront sold it for.
    pub voucher_id: SaleId,
    /// The bucket whose stock it took (the voucher itself but in a sale of several
    /// buckets): its unit goes back there.
    pub bucket: BucketId,
    /// As readers see it: an order unpaid past its deadline is expired (paying it would
    /// expire it), whether or not a sweep has expired it in MySQL yet.
    pub status: Status,
    pub created_at: DateTime<Utc>,
    /// Unpaid past its deadline in MySQL: a sweep of its voucher is due.
    pub overdue: bool,
    pub quantity: u32,
}

/// A durable write after a page of the feed (see [`Db::make_read_durable`]).
const FEED_READ: &str = "UPDATE tb_feed_read SET pages = pages + 1 WHERE id = 1";

/// How many times in all a statement runs while MySQL rolls it back for a conflict:
/// error 1213, a deadlock, or on a Galera cluster a certification failure at COMMIT or an
/// abort by another node's write. Each statement here is a whole transaction (a `CALL`
/// rolls back whole on an error, `migrations/999_procedures.sql`), so it can run again;
/// the other transaction it met has committed, so the next try finds it done.
const TRIES: u32 = 10;

/// The longest wait before a try again. Each waits a random time up to twice the last
/// one's bound, from 8 ms, so that the writers of one hot row on every node of a cluster
/// spread out instead of meeting again: at most about 0.6 s in all.
const MOST_BACKOFF: Duration = Duration::from_millis(100);

/// MySQL's error for a conflict with another transaction, as the host's driver writes it.
const CONFLICT: &str = "code: 1213";

/// MySQL's error for a lock waited for past `innodb_lock_wait_timeout` (set by each
/// procedure: 1 s for a group commit and an expiry, 5 s for a settle): on a Galera
/// cluster, the writers of one hot row on every node abort each other's transactions
/// while the others queue, and the queue can take longer than that.
const LOCK_WAIT: &str = "code: 1205";

/// A statement that failed with its error lost: Spin 4.0.2's async MySQL host drops a
/// failed statement's error and reports its own channel closing instead (the p3 build).
/// Run again only where that is safe whatever the error was: see [`Db::rows_patiently`].
const ERROR_LOST: &str = "async error: channel closed";

/// Runs a statement by `run`, again while MySQL rolls it back for one of `again` (errors
/// as the host's driver writes them), up to [`TRIES`] in all; each run again is noted in
/// the request log.
async fn retried<T, F, Run>(again: &[&str], mut run: Run) -> Result<T, mysql::Error>
where
    Run: FnMut() -> F,
    F: std::future::Future<Output = Result<T, mysql::Error>>,
{
    let mut tries = 1;
    loop {
        match run().await {
            Err(error) if tries < TRIES && is_one_of(&error, again) => {
                let bound = MOST_BACKOFF.min(Duration::from_millis(4 << tries.min(8)));
                let random = (uuid::Uuid::new_v4().as_u128() % 1_000) as u32;
                pause(bound * random / 1_000).await;
                tries += 1;
                request_log::note_mysql_retry();
            }
            done => return done,
        }
    }
}

/// Whether `error` is one of `errors`, as the host's driver writes them.
fn is_one_of(error: &mysql::Error, errors: &[&str]) -> bool {
    let text = format!("{error:?}");
    errors.iter().any(|code| text.contains(code))
}

pub struct Db {
    mysql: Connection,
}

impl Db {
    pub async fn connect(url: &str) -> Result<Db, DbError> {
        Ok(Db {
            mysql: Connection::open(url).await?,
        })
    }

    /// Whether a read waits for the cluster's commits: `false` on a Galera node set not
    /// to (`wsrep_sync_wait`), where a buyer's read right after her `201` may miss it.
    pub async fn reads_fresh(&self) -> Result<bool, DbError> {
        Ok(sql::reads_fresh(&self.rows(sql::GALERA_READS, &[]).await?)?)
    }

    /// The statement's rows, as `seckill_core::sql` reads them; run again after a
    /// conflict (see [`TRIES`]).
    async fn rows(
        &self,
        statement: &str,
        params: &[ParameterValue],
    ) -> Result<Vec<Vec<Value>>, DbError> {
        self.rows_again(&[CONFLICT], statement, params).await
    }

    /// [`Db::rows`], run again after a lock wait that timed out, or a failure whose error
    /// the host lost, too: for a buyer's settling of her order, a sweep's expiries and a
    /// read of the feed, which had rather wait than fail (the group commit gives up on a
    /// stuck row, and its buyers hear it), and which are safe to run again whatever
    /// became of the last run: each does what is left to do, or nothing.
    async fn rows_patiently(
        &self,
        statement: &str,
        params: &[ParameterValue],
    ) -> Result<Vec<Vec<Value>>, DbError> {
        self.rows_again(&[CONFLICT, LOCK_WAIT, ERROR_LOST], statement, params)
            .await
    }

    async fn rows_again(
        &self,
        again: &[&str],
        statement: &str,
        params: &[ParameterValue],
    ) -> Result<Vec<Vec<Value>>, DbError> {
        let rows = retried(again, || self.mysql.query(statement, params)).await?;
        Ok(rows
            .into_iter()
            .map(|row| row.into_iter().map(value).collect())
            .collect())
    }

    /// Inserts the voucher and its sale terms, in as many buckets as it asks, in one
    /// transaction, under the ids `ids` when given (`None` when one was taken); returns
    /// the buckets, the new voucher first, each one's share, and when the sale was created
    /// (unix seconds).
    pub async fn create_voucher(
        &self,
        voucher: &NewVoucherRow,
        ids: Option<&[BucketId]>,
    ) -> Result<Option<(Buckets, Vec<u64>, i64)>, DbError> {
        // In the order of sql::CREATE_VOUCHER_PARAMETERS, as many.
        let params: [_; sql::CREATE_VOUCHER_PARAMETERS.len()] = [
            ParameterValue::Str(voucher.title.to_string()),
            ParameterValue::Str(voucher.description.to_string()),
            ParameterValue::Uint64(voucher.stock),
            datetime(voucher.begin),
            datetime(voucher.end),
            ParameterValue::Uint64(voucher.pay_within_s),
            ParameterValue::Uint64(voucher.buckets),
            ParameterValue::Uint64(voucher.draw_ms),
            match ids {
                Some(ids) => ParameterValue::Str(sql::ids_json(ids)),
                None => ParameterValue::DbNull,
            },
            ParameterValue::Uint64(voucher.per_buyer),
            voucher.announce.map_or(ParameterValue::DbNull, datetime),
        ];
        Ok(sql::created(
            &self.rows(sql::CREATE_VOUCHER, &params).await?,
        )?)
    }

    /// Removes a voucher (its sale terms go with it): undoes a creation that could not finish.
    pub async fn delete_voucher(&self, id: BucketId) -> Result<(), DbError> {
        let params = [ParameterValue::Uint64(id.raw())];
        retried(&[CONFLICT], || {
            self.mysql.execute(sql::DELETE_VOUCHER, &params)
        })
        .await?;
        Ok(())
    }

    /// The highest voucher id handed out, if any.
    pub async fn highest_voucher(&self) -> Result<Option<VoucherId>, DbError> {
        Ok(sql::highest(&self.rows(sql::HIGHEST_VOUCHER, &[]).await?)?)
    }

    /// The voucher's terms, if it exists, and the highest voucher id handed out.
    pub async fn lookup(&self, id: BucketId) -> Result<Lookup, DbError> {
        let voucher = self
            .rows(sql::VOUCHER, &[ParameterValue::Uint64(id.raw())])
            .await?;
        let highest = self.rows(sql::HIGHEST_VOUCHER, &[]).await?;
        Ok(sql::lookup(&voucher, &highest)?)
    }

    /// Commits queued purchases `(order id, buyer, units)` of one voucher in one transaction
    /// (see `seckill_commit_batch`) and returns the verdict on each, in order, with the
    /// voucher's number of orders after it. Written again after a lost reply, a batch
    /// changes nothing and gets the same verdicts.
    pub async fn commit_batch(
        &self,
        voucher_id: BucketId,
        batch: &[Committing],
    ) -> Result<Committed, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Str(sql::batch_json(batch)),
        ];
        Ok(sql::committed(
            batch,
            &self.rows(sql::COMMIT_BATCH, &params).await?,
        )?)
    }

    pub async fn order(&self, id: OrderId) -> Result<Option<OrderRow>, DbError> {
        let rows = self
            .rows(sql::ORDER, &[ParameterValue::Uint64(id.raw())])
            .await?;
        Ok(rows.first().map(|row| order_row(row)).transpose()?)
    }

    /// The voucher's orders after the order id `after`, in id order.
    pub async fn voucher_orders(
        &self,
        voucher_id: SaleId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<OrderRow>, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Uint64(after.raw()),
            ParameterValue::Uint32(limit),
        ];
        let rows = self.rows(sql::VOUCHER_ORDERS, &params).await?;
        Ok(rows
            .iter()
            .map(|row| order_row(row))
            .collect::<Result<_, _>>()?)
    }

    /// The sales below the id `before`, newest first.
    pub async fn vouchers(&self, before: u64, limit: u32) -> Result<Vec<Listed>, DbError> {
        let params = [
            ParameterValue::Uint64(before),
            ParameterValue::Uint32(limit),
        ];
        Ok(sql::listed(&self.rows(sql::VOUCHERS_PAGE, &params).await?)?)
    }

    /// The sale, as the merchant's list shows it, if it exists.
    pub async fn sale(&self, id: SaleId) -> Result<Option<Listed>, DbError> {
        let rows = self
            .rows(sql::SALE, &[ParameterValue::Uint64(id.raw())])
            .await?;
        Ok(sql::listed(&rows)?.into_iter().next())
    }

    /// Changes the sale's terms to `terms` if they are still at `version`; `reshape` for a
    /// change only an unopened sale may take, refused within `guard_s` of its opening
    /// (`seckill_change_sale`).
    pub async fn change_sale(
        &self,
        id: SaleId,
        version: u64,
        reshape: bool,
        guard_s: u64,
        terms: &NewVoucherRow,
    ) -> Result<SaleChange, DbError> {
        let params = [
            ParameterValue::Uint64(id.raw()),
            ParameterValue::Uint64(version),
            ParameterValue::Uint64(reshape.into()),
            ParameterValue::Uint64(guard_s),
            ParameterValue::Str(terms.title.to_string()),
            ParameterValue::Str(terms.description.to_string()),
            ParameterValue::Uint64(terms.stock),
            datetime(terms.begin),
            datetime(terms.end),
            ParameterValue::Uint64(terms.pay_within_s),
            ParameterValue::Uint64(terms.draw_ms),
            ParameterValue::Uint64(terms.per_buyer),
            terms.announce.map_or(ParameterValue::DbNull, datetime),
        ];
        Ok(sql::changed(&self.rows(sql::CHANGE_SALE, &params).await?)?)
    }

    /// The buyer's order of the voucher, if she has one.
    pub async fn order_of(
        &self,
        user: UserId,
        voucher_id: SaleId,
    ) -> Result<Option<OrderId>, DbError> {
        let params = [
            ParameterValue::Uint64(user.raw()),
            ParameterValue::Uint64(voucher_id.raw()),
        ];
        Ok(sql::order_of(&self.rows(sql::ORDER_OF, &params).await?)?)
    }

    /// Moves an unpaid order to `to` for `buyer` (`None`: anyone's), or expires it when
    /// it is past its deadline (see `seckill_settle_order`): its status after, whether
    /// this call changed it, and its voucher; `None` when there is no such order.
    pub async fn settle_order(
        &self,
        order_id: OrderId,
        buyer: Option<UserId>,
        to: Status,
    ) -> Result<Option<(Status, bool, BucketId)>, DbError> {
        let params = [
            ParameterValue::Uint64(order_id.raw()),
            ParameterValue::Uint64(buyer.map_or(0, UserId::raw)),
            ParameterValue::Uint8(to as u8),
        ];
        Ok(sql::settled(
            &self.rows_patiently(sql::SETTLE_ORDER, &params).await?,
        )?)
    }

    /// Expires up to `limit` of the voucher's unpaid orders past their deadline: how
    /// many, and the earliest deadline left (unix seconds).
    pub async fn expire_due(
        &self,
        voucher_id: BucketId,
        limit: u32,
    ) -> Result<(usize, Option<i64>), DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Uint32(limit),
        ];
        let (expired, next) = sql::expired(&self.rows_patiently(sql::EXPIRE_DUE, &params).await?)?;
        Ok((expired.len(), next))
    }

    /// The voucher's units given back after the event `after`, oldest first.
    pub async fn returns_after(
        &self,
        voucher_id: BucketId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Returned>, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Uint64(after),
            ParameterValue::Uint32(limit),
        ];
        Ok(sql::returns(
            &self.rows(sql::RETURNS_AFTER, &params).await?,
        )?)
    }

    /// A page of the order feed after the event `after`.
    pub async fn events(&self, after: u64, limit: u32) -> Result<Vec<sql::Event>, DbError> {
        let params = [ParameterValue::Uint64(after), ParameterValue::Uint32(limit)];
        Ok(sql::events(
            &self.rows_patiently(sql::EVENTS_PAGE, &params).await?,
        )?)
    }

    /// Expires, in one transaction, the `oldest` longest overdue unpaid orders of every
    /// sale and the `newest` most recently overdue: the buckets whose orders it expired.
    pub async fn expire_overdue(&self, oldest: u32, newest: u32) -> Result<Vec<BucketId>, DbError> {
        let params = [
            ParameterValue::Uint32(oldest),
            ParameterValue::Uint32(newest),
        ];
        // No lock waits to run again after: it waits for none, and the next read is its
        // next try.
        let rows = self.rows(sql::EXPIRE_OVERDUE, &params).await?;
        Ok(sql::overdue(&rows)?)
    }

    /// Commits a write that changes a row: InnoDB shows a commit to readers before its
    /// redo log reaches the disk, and flushes the log in order, so once this commits every
    /// event read before it survives a crash of MySQL (docs/design.md, "The feed across a
    /// crash").
    pub async fn make_read_durable(&self) -> Result<(), DbError> {
        retried(&[CONFLICT], || self.mysql.execute(FEED_READ, &[])).await?;
        Ok(())
    }

    /// Ends the voucher's sale now.
    pub async fn end_sale(&self, voucher_id: SaleId) -> Result<(), DbError> {
        let params = [ParameterValue::Uint64(voucher_id.raw())];
        retried(&[CONFLICT], || self.mysql.execute(sql::END_SALE, &params)).await?;
        Ok(())
    }

    /// The voucher's buyers in order id order, starting after `after`, for a sync.
    pub async fn buyers_page(
        &self,
        voucher_id: BucketId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<(UserId, Record)>, DbError> {
        let params = [
            ParameterValue::Uint64(voucher_id.raw()),
            ParameterValue::Uint64(after.raw()),
            ParameterValue::Uint32(limit),
        ];
        Ok(sql::buyers(&self.rows(sql::BUYERS_PAGE, &params).await?)?)
    }
}

fn datetime(at: DateTime<Utc>) -> ParameterValue {
    ParameterValue::Str(at.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// A column as `seckill_core::sql` reads it: integers of any width as one, text as text.
fn value(value: DbValue) -> Value {
    match value {
        DbValue::Int8(v) => Value::Int(v.into()),
        DbValue::Int16(v) => Value::Int(v.into()),
        DbValue::Int32(v) => Value::Int(v.into()),
        DbValue::Int64(v) => Value::Int(v.into()),
        DbValue::Uint8(v) => Value::Int(v.into()),
        DbValue::Uint16(v) => Value::Int(v.into()),
        DbValue::Uint32(v) => Value::Int(v.into()),
        DbValue::Uint64(v) => Value::Int(v.into()),
        DbValue::Str(text) => Value::Text(text),
        DbValue::Binary(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Value::Text(text),
            Err(_) => Value::Null,
        },
        DbValue::DbNull => Value::Null,
        other => Value::Text(format!("{other:?}")),
    }
}

/// A row of `sql::ORDER`'s columns.
fn order_row(row: &[Value]) -> Result<OrderRow, UnexpectedRow> {
    let overdue = sql::int(row, 5)? == 1;
    Ok(OrderRow {
        id: OrderId::from_raw(sql::unsigned(row, 0)?),
        user_id: UserId::from_raw(sql::unsigned(row, 1)?),
        voucher_id: SaleId::from_raw(sql::unsigned(row, 6)?),
        bucket: BucketId::from_raw(sql::unsigned(row, 2)?),
        status: match Status::of(sql::unsigned(row, 3)?) {
            _ if overdue => Status::Expired,
            Some(status) => status,
            None => return Err(UnexpectedRow("order status out of range".into())),
        },
        created_at: timestamp(row, 4)?,
        overdue,
        quantity: sql::units(row, 7)?,
    })
}

fn timestamp(row: &[Value], index: usize) -> Result<DateTime<Utc>, UnexpectedRow> {
    i64::try_from(sql::int(row, index)?)
        .ok()
        .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
        .ok_or_else(|| UnexpectedRow(format!("column {index} is not a time")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors as Spin's host writes them: mysql_async's server error, and Spin
    /// 4.0.2's lost one.
    #[test]
    fn a_conflict_and_a_lock_wait_are_told_apart_from_other_failures() {
        let server = |code: u32, message: &str| {
            mysql::Error::QueryFailed(format!(
                "Server(ServerError {{ code: {code}, message: \"{message}\", state: \"40001\" }})"
            ))
        };
        let conflict = server(1213, "Deadlock found when trying to get lock");
        let wait = server(1205, "Lock wait timeout exceeded");
        let duplicate = server(1062, "Duplicate entry");
        let lost = mysql::Error::Other("async error: channel closed".into());
        assert!(is_one_of(&conflict, &[CONFLICT]));
        assert!(!is_one_of(&wait, &[CONFLICT]));
        assert!(is_one_of(&wait, &[CONFLICT, LOCK_WAIT]));
        assert!(!is_one_of(&duplicate, &[CONFLICT, LOCK_WAIT, ERROR_LOST]));
        assert!(is_one_of(&lost, &[CONFLICT, LOCK_WAIT, ERROR_LOST]));
        assert!(!is_one_of(&lost, &[CONFLICT]));
    }

    #[test]
    fn integers_of_any_width_read_as_one() {
        let row: Vec<Value> = [
            DbValue::Uint32(7),
            DbValue::Int64(-1),
            DbValue::Uint64(u64::MAX),
            DbValue::DbNull,
        ]
        .into_iter()
        .map(value)
        .collect();
        assert_eq!(sql::unsigned(&row, 0).unwrap(), 7);
        assert!(sql::unsigned(&row, 1).is_err());
        assert_eq!(sql::unsigned(&row, 2).unwrap(), u64::MAX);
        assert_eq!(row[3], Value::Null);
    }

    #[test]
    fn times_cross_as_utc_seconds() {
        let row = [Value::Int(1_700_000_000)];
        assert_eq!(
            timestamp(&row, 0).unwrap().to_rfc3339(),
            "2023-11-14T22:13:20+00:00"
        );
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert!(matches!(datetime(at), ParameterValue::Str(s) if s == "2023-11-14 22:13:20"));
    }
}

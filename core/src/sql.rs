//! The MySQL statements whose rows the decisions read, and how to read them: the
//! component runs them through Spin's MySQL API, the tests through a client of their own,
//! and both hand the rows over as [`Value`]s, so there is one reader of each.
//!
//! Writes that must be atomic are stored procedures (`migrations/999_procedures.sql`):
//! Spin's MySQL API prepares every statement (no START TRANSACTION), so one CALL per
//! write is both atomic and a single round trip.

use const_format::formatcp;

use crate::buckets::{parse_ids, Buckets, Spread};
use crate::error::{ApiError, UnexpectedRow};
use crate::ids::{BucketId, SaleId, UserId, VoucherId};
use crate::ledger::{Ledger, ReturnKind, Returned};
use crate::order_id::OrderId;
use crate::sale::{Record, Terms};
use crate::verdict::{Committed, Committing, Told};

/// One column of a row, as either client hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i128),
    Text(String),
}

type Read<T> = Result<T, UnexpectedRow>;

/// A voucher's sale terms, by id, their version, and the last of its units given back
/// (a return's or a restock's event id, in
/// the same read, so that the stock and the events it counts agree; cast, since Spin's
/// MySQL API takes no DECIMAL, which `COALESCE` of an unsigned column makes). DATETIME columns do not cross Spin's MySQL API (they map
/// to an unsupported type), so times travel as whole seconds since 1970; the columns hold
/// UTC. Read by [`terms`].
pub const VOUCHER: &str = formatcp!(
    "SELECT s.stock, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.begin_time), \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.end_time), \
     s.initial_stock, v.title, v.description, s.pay_within_s, s.draw_ms, s.per_buyer, \
     CAST((SELECT COALESCE(MAX(e.id), 0) FROM tb_order_event e \
       WHERE e.voucher_id = v.id AND e.type IN ({CANCELLED}, {EXPIRED}, {RESTOCKED})) \
       AS UNSIGNED), \
     s.orders, s.sale_id, \
     (SELECT GROUP_CONCAT(b.voucher_id ORDER BY b.voucher_id) FROM tb_seckill_voucher b \
       WHERE b.sale_id = v.id AND b.voucher_id <> v.id), v.id, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', v.create_time), \
     COALESCE(TIMESTAMPDIFF(SECOND, '1970-01-01', s.announce_time), 0), \
     COALESCE(s.announce_time > UTC_TIMESTAMP(), 0), s.terms_version \
     FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?",
    CANCELLED = EventType::Cancelled as u8,
    EXPIRED = EventType::Expired as u8,
    RESTOCKED = EventType::Restocked as u8,
);

/// Whether the server is a Galera node, and whether its reads wait for the cluster's
/// commits (`wsrep_sync_wait`): no rows on MySQL 8, or a MariaDB built without Galera.
/// Read by [`reads_fresh`].
pub const GALERA_READS: &str =
    "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_sync_wait')";

/// [`GALERA_READS`]'s rows: `false` on a Galera node whose reads may miss another node's
/// fresh commit (`wsrep_sync_wait` without its read bit, 1), else `true`.
pub fn reads_fresh(rows: &[Vec<Value>]) -> Read<bool> {
    let mut galera = false;
    let mut waits = false;
    for row in rows {
        match text(row, 0)?.to_lowercase().as_str() {
            "wsrep_on" => galera = text(row, 1)?.eq_ignore_ascii_case("on"),
            "wsrep_sync_wait" => waits = unsigned(row, 1)? & 1 == 1,
            other => return Err(UnexpectedRow(format!("variable {other}"))),
        }
    }
    Ok(!galera || waits)
}

/// Creates a voucher and its sale terms in one transaction: title, description, stock,
/// begin and end (`YYYY-MM-DD HH:MM:SS`, UTC), seconds a winner has to pay, buckets,
/// the opening draw's milliseconds (0: none), the buckets' ids (NULL: MySQL's next
/// ones; else a JSON array, which it takes only when every voucher id is below the first),
/// the most units one buyer may hold, and when it is listed (NULL: at once).
/// Returns a row per bucket, the new voucher first: its id, its share of the stock and
/// when it was created (unix seconds, the same for every bucket); none when the ids given
/// were not free. Read by [`created`].
pub const CREATE_VOUCHER: &str = "CALL seckill_create_voucher(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// [`CREATE_VOUCHER`]'s parameters in their order, as the procedure names them (each
/// `p_<name>`; held against MySQL's catalogue by `backends::sql_procedures`).
pub const CREATE_VOUCHER_PARAMETERS: [&str; 11] = [
    "title",
    "description",
    "stock",
    "begin",
    "end",
    "pay_within_s",
    "buckets",
    "draw_ms",
    "ids",
    "per_buyer",
    "announce",
];

/// [`CREATE_VOUCHER`]'s rows: the sale's buckets, the voucher the storefront sells first,
/// and each one's share of the stock, in the same order, and when the sale was created;
/// `None` when the ids it was given were not free.
pub fn created(rows: &[Vec<Value>]) -> Read<Option<(Buckets, Vec<u64>, i64)>> {
    let ids = rows
        .iter()
        .map(|row| unsigned(row, 0))
        .collect::<Read<Vec<_>>>()?;
    let shares = rows
        .iter()
        .map(|row| unsigned(row, 1))
        .collect::<Read<Vec<_>>>()?;
    let Some((first, others)) = ids.split_first() else {
        return Ok(None);
    };
    // The first row is the sale's: the voucher the storefront sells.
    let others: Vec<BucketId> = others.iter().copied().map(BucketId::from_raw).collect();
    Ok(Some((
        Buckets::new(SaleId::from_raw(*first), &others),
        shares,
        seconds(&rows[0], 2)?,
    )))
}

/// Moves an unpaid order on, or expires it when past its deadline: order id, the buyer
/// it must belong to (0: anyone's), the status asked for ([`Status::Paid`] or
/// [`Status::Cancelled`]). Read by [`settled`].
pub const SETTLE_ORDER: &str = "CALL seckill_settle_order(?, ?, ?)";

/// Expires up to a number of the voucher's unpaid orders past their deadline: voucher
/// id, the number. Read by [`expired`].
pub const EXPIRE_DUE: &str = "CALL seckill_expire_due(?, ?)";

/// The voucher's units given back after an event id (cancellations and expiries, each
/// with its order's units, and restocks, each with the units it added; oldest first; cast: Spin's MySQL API takes no DECIMAL, which
/// `COALESCE` of an unsigned column makes): voucher id, the event id, the most to read.
/// Read by [`returns`].
pub const RETURNS_AFTER: &str = formatcp!(
    "SELECT e.id, e.type, e.order_id, e.user_id, \
     CAST(COALESCE(e.units, \
       (SELECT o.quantity FROM tb_voucher_order o WHERE o.id = e.order_id), 1) AS UNSIGNED) \
     FROM tb_order_event e \
     WHERE e.voucher_id = ? AND e.type IN ({CANCELLED}, {EXPIRED}, {RESTOCKED}) AND e.id > ? \
     ORDER BY e.id LIMIT ?",
    CANCELLED = EventType::Cancelled as u8,
    EXPIRED = EventType::Expired as u8,
    RESTOCKED = EventType::Restocked as u8,
);

/// An order's columns, as the component's order reads take them; MySQL's clock says what
/// is overdue, as it does when it expires orders.
const ORDER_COLUMNS: &str = formatcp!(
    "SELECT id, user_id, voucher_id, status, \
     TIMESTAMPDIFF(SECOND, '1970-01-01', create_time), \
     status = {UNPAID} AND expire_time <= UTC_TIMESTAMP(), sale_id, quantity \
     FROM tb_voucher_order ",
    UNPAID = Status::Unpaid as u8,
);
/// An order by id, as [`ORDER_COLUMNS`].
pub const ORDER: &str = formatcp!("{ORDER_COLUMNS}WHERE id = ?");
/// A page of a voucher's orders in id order, whichever bucket sold them, as
/// [`ORDER_COLUMNS`]: voucher id, the order id after which to start, the page's size.
pub const VOUCHER_ORDERS: &str =
    formatcp!("{ORDER_COLUMNS}WHERE sale_id = ? AND id > ? ORDER BY id LIMIT ?");
/// Expires unpaid orders past their deadline of every sale in one transaction: how many of
/// the longest overdue, how many of the most recently overdue. One row per bucket whose
/// orders it expired and that has a sale (a stock row). Read by [`overdue`].
pub const EXPIRE_OVERDUE: &str = "CALL seckill_expire_overdue(?, ?)";

/// A page of the order feed, once the events committed since the last read have their
/// place in it: the place after which to start, the page's size. Read by [`events`].
pub const EVENTS_PAGE: &str = "CALL seckill_feed_page(?, ?)";

/// A sale as the merchant's list shows it: its terms with the stock and orders of all its
/// buckets (a later bucket is no sale of its own to list), how many buckets it has, and
/// the version of its terms. Read by [`listed`].
const LISTING: &str = "SELECT \
     CAST((SELECT SUM(b.stock) FROM tb_seckill_voucher b WHERE b.sale_id = v.id) AS UNSIGNED), \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.begin_time), \
     TIMESTAMPDIFF(SECOND, '1970-01-01', s.end_time), \
     CAST((SELECT SUM(b.initial_stock) FROM tb_seckill_voucher b WHERE b.sale_id = v.id) \
       AS UNSIGNED), \
     v.title, v.description, s.pay_within_s, s.draw_ms, s.per_buyer, v.id, \
     COALESCE(TIMESTAMPDIFF(SECOND, '1970-01-01', s.announce_time), 0), \
     CAST((SELECT SUM(b.orders) FROM tb_seckill_voucher b WHERE b.sale_id = v.id) AS UNSIGNED), \
     (SELECT COUNT(*) FROM tb_seckill_voucher b WHERE b.sale_id = v.id), s.terms_version \
     FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id ";

/// The sales below an id, newest first, as [`LISTING`]: the id, the page's size.
pub const VOUCHERS_PAGE: &str =
    formatcp!("{LISTING}WHERE v.id < ? AND s.sale_id = v.id ORDER BY v.id DESC LIMIT ?");

/// One sale, as [`LISTING`]: its id.
pub const SALE: &str = formatcp!("{LISTING}WHERE v.id = ? AND s.sale_id = v.id");

/// A sale as [`LISTING`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: SaleId,
    /// Its terms, with the stock of every bucket.
    pub terms: Terms,
    /// Its orders, whatever became of them.
    pub orders: u64,
    pub buckets: u64,
    pub terms_version: u64,
}

/// [`LISTING`]'s rows.
pub fn listed(rows: &[Vec<Value>]) -> Read<Vec<Listed>> {
    rows.iter()
        .map(|row| {
            Ok(Listed {
                id: SaleId::from_raw(unsigned(row, 9)?),
                terms: terms(row, 10)?,
                orders: unsigned(row, 11)?,
                buckets: unsigned(row, 12)?,
                terms_version: unsigned(row, 13)?,
            })
        })
        .collect()
}

/// Changes a sale's terms, if they are still at a version (`seckill_change_sale`): sale
/// id, version, whether the change needs the sale unopened (1) or not (0), the guard
/// before its opening in seconds, then the new terms (title, description, stock, begin,
/// end, pay_within_s, draw_ms, per_buyer, announce). Read by [`changed`].
pub const CHANGE_SALE: &str = "CALL seckill_change_sale(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// What [`CHANGE_SALE`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleChange {
    /// Changed; the terms' version now.
    Changed(u64),
    /// The terms moved on since they were read (another change, an end).
    Stale,
    /// The change needs the sale unopened, and it has opened.
    Open,
    /// The change moves the end of a sale that has ended.
    Ended,
    Missing,
}

/// [`CHANGE_SALE`]'s row.
pub fn changed(rows: &[Vec<Value>]) -> Read<SaleChange> {
    let row = rows
        .first()
        .ok_or_else(|| UnexpectedRow("no outcome of a change".into()))?;
    match text(row, 0)?.as_str() {
        "changed" => Ok(SaleChange::Changed(unsigned(row, 1)?)),
        "stale" => Ok(SaleChange::Stale),
        "open" => Ok(SaleChange::Open),
        "ended" => Ok(SaleChange::Ended),
        "missing" => Ok(SaleChange::Missing),
        other => Err(UnexpectedRow(format!("change outcome {other:?}"))),
    }
}

/// Ends a voucher's sale now, every bucket of it (a window that ended already stays as it
/// is), and moves its terms' version on, so that a change read before it writes nothing
/// (`seckill_change_sale`): voucher id.
pub const END_SALE: &str = "UPDATE tb_seckill_voucher \
     SET begin_time = LEAST(begin_time, UTC_TIMESTAMP()), \
         end_time = LEAST(end_time, UTC_TIMESTAMP()), \
         terms_version = terms_version + 1 WHERE sale_id = ?";

/// Removes a voucher (its sale terms go with it), by id.
pub const DELETE_VOUCHER: &str = "DELETE FROM tb_voucher WHERE id = ?";

/// The buyer's order of the voucher, whichever bucket sold it: user id, voucher id. Read
/// by [`order_of`].
pub const ORDER_OF: &str = "SELECT id FROM tb_voucher_order WHERE user_id = ? AND sale_id = ?";

/// The highest voucher id handed out (one row, `NULL` when there is none). Read by
/// [`highest`].
pub const HIGHEST_VOUCHER: &str = "SELECT MAX(id) FROM tb_voucher";

/// A page of a voucher's buyers in order id order: voucher id, the order id after which
/// to start, and the page's size. Read by [`buyers`].
pub const BUYERS_PAGE: &str = "SELECT user_id, id, status, quantity FROM tb_voucher_order \
     WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?";

/// Commits a batch of one voucher's purchases in one transaction: the voucher's id, and
/// the batch as [`batch_json`]. Returns one row: for each purchase, in order, MySQL's
/// verdict by its name ([`Verdict::tag`]) and the order it is about
/// ([`Verdict::order_id`]); the voucher's [`Ledger`] once the batch committed; and the
/// orders it inserted. Read by [`committed`].
pub const COMMIT_BATCH: &str = "CALL seckill_commit_batch(?, ?)";

/// The batch as [`COMMIT_BATCH`] takes it: a JSON array of `["<order id>", "<user id>",
/// <units>]`, the ids strings so that none loses digits.
pub fn batch_json(batch: &[Committing]) -> String {
    let entries: Vec<(String, String, u32)> = batch
        .iter()
        .map(|(order_id, user, units)| (order_id.to_string(), user.to_string(), *units))
        .collect();
    serde_json::to_string(&entries).expect("strings encode")
}

/// Bucket ids as [`CREATE_VOUCHER`] takes them: a JSON array of numbers.
pub fn ids_json(ids: &[BucketId]) -> String {
    let ids: Vec<u64> = ids.iter().map(|id| id.raw()).collect();
    serde_json::to_string(&ids).expect("numbers encode")
}

/// What MySQL said of a voucher: its terms, if it exists, with the highest voucher id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Its terms as MySQL holds them, if it exists.
    pub terms: Option<Terms>,
    /// The highest voucher id MySQL has handed out; `None` when it has no voucher. A
    /// [`VoucherId`]: `MAX(id)` of every row, sales' and later buckets' alike.
    pub highest: Option<VoucherId>,
    /// What its stock counts.
    pub ledger: Ledger,
    /// Where the sale's stock lives.
    pub spread: Spread,
    /// When MySQL created it, unix seconds (0 when it does not exist): an id MySQL hands
    /// out again names another sale, created later (docs/design.md, "A reused id").
    pub created: i64,
    /// It exists and is not listed yet by MySQL's clock (`Terms::announce_ms`): a public
    /// lookup finds it unknown.
    pub unlisted: bool,
    /// The version of its terms (`seckill_change_sale`; 0 when it does not exist).
    pub terms_version: u64,
}

/// [`VOUCHER`]'s rows and [`HIGHEST_VOUCHER`]'s.
pub fn lookup(voucher: &[Vec<Value>], highest_rows: &[Vec<Value>]) -> Read<Lookup> {
    let (terms, ledger, spread, created, unlisted, terms_version) = match voucher.first() {
        Some(row) => (
            Some(terms(row, 15)?),
            Ledger {
                returned_event: unsigned(row, 9)?,
                orders: unsigned(row, 10)?,
                stock: unsigned(row, 0)?,
            },
            spread(row)?,
            seconds(row, 14)?,
            unsigned(row, 16)? == 1,
            unsigned(row, 17)?,
        ),
        None => (None, Ledger::default(), Spread::Whole, 0, false, 0),
    };
    Ok(Lookup {
        terms,
        highest: highest(highest_rows)?,
        ledger,
        spread,
        created,
        unlisted,
        terms_version,
    })
}

/// [`VOUCHER`]'s sale id and the sale's other buckets.
fn spread(row: &[Value]) -> Read<Spread> {
    let sale = SaleId::from_raw(unsigned(row, 11)?);
    if sale.raw() != unsigned(row, 13)? {
        return Ok(Spread::BucketOf(sale));
    }
    let others = match column(row, 12)? {
        Value::Null => return Ok(Spread::Whole),
        Value::Int(_) => vec![BucketId::from_raw(unsigned(row, 12)?)],
        Value::Text(ids) => {
            parse_ids(ids).ok_or_else(|| UnexpectedRow(format!("buckets {ids:?}")))?
        }
    };
    Ok(Spread::First(others))
}

/// A row's terms: its first nine columns, and the announcement's at `announce`.
fn terms(row: &[Value], announce: usize) -> Read<Terms> {
    Ok(Terms {
        stock: unsigned(row, 0)?,
        begin_ms: seconds(row, 1)? * 1000,
        end_ms: seconds(row, 2)? * 1000,
        initial_stock: unsigned(row, 3)?,
        title: text(row, 4)?,
        description: text(row, 5)?,
        pay_within_s: unsigned(row, 6)?,
        draw_ms: unsigned(row, 7)?,
        per_buyer: unsigned(row, 8)?,
        announce_ms: seconds(row, announce)? * 1000,
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

/// An order's status, as `tb_voucher_order.status` holds it; the procedures name each
/// `status_<name>` (held against this by `codes_agree_with_the_procedures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Unpaid = 1,
    Paid = 2,
    Used = 3,
    Cancelled = 4,
    Refunding = 5,
    Refunded = 6,
    /// Not paid in time: its unit went back to the stock.
    Expired = 7,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Unpaid,
        Status::Paid,
        Status::Used,
        Status::Cancelled,
        Status::Refunding,
        Status::Refunded,
        Status::Expired,
    ];

    pub fn of(code: u64) -> Option<Status> {
        Status::ALL
            .into_iter()
            .find(|status| *status as u64 == code)
    }

    /// Whether an order asked to become `asked` that is `self` now is answered as such
    /// (it became so, now or before), or why not: an expired or cancelled order is never
    /// paid, a paid one never cancelled.
    pub fn settles(self, asked: Status, order_id: OrderId) -> Result<(), ApiError> {
        match (asked, self) {
            (asked, now) if asked == now => Ok(()),
            (_, Status::Expired) => Err(ApiError::OrderExpired { order_id }),
            (Status::Paid, Status::Cancelled) => Err(ApiError::OrderCancelled { order_id }),
            _ => Err(ApiError::OrderPaid { order_id }),
        }
    }

    /// The status as the API names it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Unpaid => "unpaid",
            Status::Paid => "paid",
            Status::Used => "used",
            Status::Cancelled => "cancelled",
            Status::Refunding => "refunding",
            Status::Refunded => "refunded",
            Status::Expired => "expired",
        }
    }
}

/// An event's type, as `tb_order_event.type` holds it; the procedures name each
/// `event_<name>`, the feed `order.<name>` or `sale.<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Created = 1,
    Paid = 2,
    Cancelled = 3,
    Expired = 4,
    /// The merchant added units to a bucket of the sale (`seckill_change_sale`).
    Restocked = 5,
    /// The merchant changed the sale's terms.
    Changed = 6,
}

impl EventType {
    pub const ALL: [EventType; 6] = [
        EventType::Created,
        EventType::Paid,
        EventType::Cancelled,
        EventType::Expired,
        EventType::Restocked,
        EventType::Changed,
    ];

    pub fn of(code: u64) -> Option<EventType> {
        EventType::ALL.into_iter().find(|kind| *kind as u64 == code)
    }

    /// The type as the feed names it.
    pub fn name(self) -> &'static str {
        match self {
            EventType::Created => "order.created",
            EventType::Paid => "order.paid",
            EventType::Cancelled => "order.cancelled",
            EventType::Expired => "order.expired",
            EventType::Restocked => "sale.restocked",
            EventType::Changed => "sale.changed",
        }
    }
}

/// What [`SETTLE_ORDER`] did: the order's status after it, whether this call changed it,
/// and the order's voucher; `None` when there is no such order (of that buyer).
pub fn settled(rows: &[Vec<Value>]) -> Read<Option<(Status, bool, BucketId)>> {
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let status = Status::of(unsigned(row, 0)?)
        .ok_or_else(|| UnexpectedRow("unknown order status".into()))?;
    Ok(Some((
        status,
        int(row, 1)? == 1,
        BucketId::from_raw(unsigned(row, 2)?),
    )))
}

/// The orders a sweep expired, and the earliest deadline left (unix seconds), if any.
pub type Expired = (Vec<(OrderId, UserId)>, Option<i64>);

/// [`EXPIRE_DUE`]'s rows.
pub fn expired(rows: &[Vec<Value>]) -> Read<Expired> {
    let mut orders = Vec::new();
    let mut next = None;
    for row in rows {
        if column(row, 0)? != &Value::Null {
            orders.push((
                OrderId::from_raw(unsigned(row, 0)?),
                UserId::from_raw(unsigned(row, 1)?),
            ));
        }
        if column(row, 2)? != &Value::Null {
            next = Some(seconds(row, 2)?);
        }
    }
    Ok((orders, next))
}

/// [`EXPIRE_OVERDUE`]'s rows: the buckets.
pub fn overdue(rows: &[Vec<Value>]) -> Read<Vec<BucketId>> {
    rows.iter()
        .map(|row| Ok(BucketId::from_raw(unsigned(row, 0)?)))
        .collect()
}

/// [`RETURNS_AFTER`]'s rows.
pub fn returns(rows: &[Vec<Value>]) -> Read<Vec<Returned>> {
    rows.iter()
        .map(|row| {
            let order_id = OrderId::from_raw(unsigned(row, 2)?);
            let user = UserId::from_raw(unsigned(row, 3)?);
            let kind = match EventType::of(unsigned(row, 1)?) {
                Some(EventType::Cancelled) => ReturnKind::Cancelled { order_id, user },
                Some(EventType::Expired) => ReturnKind::Expired { order_id, user },
                Some(EventType::Restocked) => ReturnKind::Restocked,
                _ => return Err(UnexpectedRow("a return of another type".into())),
            };
            Ok(Returned {
                event: unsigned(row, 0)?,
                kind,
                units: units(row, 4)?,
            })
        })
        .collect()
}

/// One change of an order, as the feed shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its place in the feed (the cursor), which the first read after its commit gave it.
    pub id: u64,
    pub kind: &'static str,
    pub order_id: OrderId,
    /// The sale: an event names the voucher the storefront sold, whichever bucket's stock
    /// it moved.
    pub voucher_id: SaleId,
    pub user: UserId,
    /// Unix seconds.
    pub at: i64,
    /// The order's units; a restock's, those it added; a change's, 0.
    pub quantity: u32,
}

/// [`EVENTS_PAGE`]'s rows.
pub fn events(rows: &[Vec<Value>]) -> Read<Vec<Event>> {
    rows.iter()
        .map(|row| {
            let code = unsigned(row, 1)?;
            let kind = EventType::of(code)
                .ok_or_else(|| UnexpectedRow(format!("event type {code}")))?
                .name();
            Ok(Event {
                id: unsigned(row, 0)?,
                kind,
                order_id: OrderId::from_raw(unsigned(row, 2)?),
                voucher_id: SaleId::from_raw(unsigned(row, 3)?),
                user: UserId::from_raw(unsigned(row, 4)?),
                at: seconds(row, 5)?,
                // A sale's change carries none (0).
                quantity: u32::try_from(unsigned(row, 6)?)
                    .map_err(|_| UnexpectedRow("column 6 is no count of units".into()))?,
            })
        })
        .collect()
}

/// [`ORDER_OF`]'s rows.
pub fn order_of(rows: &[Vec<Value>]) -> Read<Option<OrderId>> {
    rows.first()
        .map(|row| unsigned(row, 0).map(OrderId::from_raw))
        .transpose()
}

/// [`BUYERS_PAGE`]'s rows: each buyer's record as Redis keeps it.
pub fn buyers(rows: &[Vec<Value>]) -> Read<Vec<(UserId, Record)>> {
    rows.iter()
        .map(|row| {
            let order_id = OrderId::from_raw(unsigned(row, 1)?);
            let record = match Status::of(unsigned(row, 2)?) {
                Some(Status::Cancelled) => Record::Cancelled(order_id),
                Some(Status::Expired) => Record::Expired(order_id),
                _ => Record::Ordered(order_id, units(row, 3)?),
            };
            Ok((UserId::from_raw(unsigned(row, 0)?), record))
        })
        .collect()
}

/// [`COMMIT_BATCH`]'s row for `batch`: MySQL's verdict on each purchase, in order, with
/// the voucher's ledger after it.
pub fn committed(batch: &[Committing], rows: &[Vec<Value>]) -> Read<Committed> {
    let [row] = rows else {
        return Err(UnexpectedRow(format!(
            "seckill_commit_batch returned {} rows",
            rows.len()
        )));
    };
    let told: Vec<Told> = serde_json::from_str(&text(row, 0)?)
        .map_err(|error| UnexpectedRow(format!("seckill_commit_batch verdicts: {error}")))?;
    if told.len() != batch.len() {
        return Err(UnexpectedRow(format!(
            "seckill_commit_batch returned {} verdicts for {} purchases",
            told.len(),
            batch.len()
        )));
    }
    let verdicts = told
        .iter()
        .zip(batch)
        .map(|(told, (order_id, ..))| {
            // A verdict about the purchase's own order names its id.
            told.verdict()
                .filter(|(verdict, about)| verdict.order_id(*order_id) == *about)
                .map(|(verdict, _)| verdict)
                .ok_or_else(|| UnexpectedRow(format!("seckill_commit_batch verdict {told:?}")))
        })
        .collect::<Read<_>>()?;
    Ok(Committed {
        verdicts,
        ledger: Ledger {
            orders: unsigned(row, 1)?,
            returned_event: unsigned(row, 2)?,
            stock: unsigned(row, 4)?,
        },
        created: unsigned(row, 3)?,
    })
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

/// A count of units: an order's quantity, a sale's limit per buyer.
pub fn units(row: &[Value], index: usize) -> Read<u32> {
    u32::try_from(unsigned(row, index)?)
        .ok()
        .filter(|units| *units > 0)
        .ok_or_else(|| UnexpectedRow(format!("column {index} is no count of units")))
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
    #[test]
    fn every_status_and_event_type_is_read_back_from_its_code() {
        for status in Status::ALL {
            assert_eq!(Status::of(status as u64), Some(status));
        }
        for kind in EventType::ALL {
            assert_eq!(EventType::of(kind as u64), Some(kind));
        }
        assert_eq!((Status::of(0), EventType::of(7)), (None, None));
    }

    #[test]
    fn an_order_settles_as_asked_or_says_why_not() {
        let order_id = OrderId::from_raw(9);
        let expired = Err(ApiError::OrderExpired { order_id });
        for (asked, now, answer) in [
            (Status::Paid, Status::Paid, Ok(())),
            (Status::Cancelled, Status::Cancelled, Ok(())),
            (Status::Paid, Status::Expired, expired.clone()),
            (Status::Cancelled, Status::Expired, expired),
            (
                Status::Paid,
                Status::Cancelled,
                Err(ApiError::OrderCancelled { order_id }),
            ),
            (
                Status::Cancelled,
                Status::Paid,
                Err(ApiError::OrderPaid { order_id }),
            ),
        ] {
            assert_eq!(now.settles(asked, order_id), answer, "{asked:?} of {now:?}");
        }
    }

    #[test]
    fn a_creation_binds_every_parameter_it_names() {
        assert_eq!(
            super::CREATE_VOUCHER.matches('?').count(),
            super::CREATE_VOUCHER_PARAMETERS.len()
        );
    }

    use super::*;
    use crate::verdict::Verdict;

    /// Each migration's text, by file name.
    fn migrations() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn codes_agree_with_the_procedures() {
        let statuses = Status::ALL.into_iter();
        let events = EventType::ALL.into_iter();
        let named: Vec<(String, u64)> = statuses
            .map(|status| (format!("status_{}", status.name()), status as u64))
            .chain(events.map(|event| {
                let name = event.name().rsplit('.').next().unwrap();
                (format!("event_{name}"), event as u64)
            }))
            .collect();
        let mut declared = 0;
        for (file, text) in migrations() {
            for line in text.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                if let ["DECLARE", name, "TINYINT", "UNSIGNED", "DEFAULT", code] = words[..] {
                    if name.starts_with("status_") || name.starts_with("event_") {
                        let code: u64 = code.trim_end_matches(';').parse().unwrap();
                        assert!(
                            named.contains(&(name.to_string(), code)),
                            "{file}: {name} = {code} is no code Rust names so"
                        );
                        declared += 1;
                    }
                }
            }
            // A status or a type compared with, or written as, a bare number.
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for bare in ["status = ", "type = ", "type IN (", "status IN ("] {
                for (at, _) in flat.match_indices(bare) {
                    let next = flat[at + bare.len()..].chars().next().unwrap();
                    assert!(!next.is_ascii_digit(), "{file}: {}", &flat[at..at + 20]);
                }
            }
        }
        assert!(declared >= 15, "{declared} declarations read");
    }

    #[test]
    fn the_group_commit_reads_order_ids_seconds_from_their_epoch() {
        let declared = format!(
            "DECLARE order_epoch BIGINT UNSIGNED DEFAULT {};",
            crate::order_id::EPOCH
        );
        let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(migrations()
            .iter()
            .any(|(_, text)| flat(text).contains(&declared)));
    }

    #[test]
    fn reads_are_fresh_but_on_a_galera_node_that_does_not_wait() {
        let variables = |on: &str, wait: &str| {
            vec![
                vec![Value::Text("wsrep_on".into()), Value::Text(on.into())],
                vec![
                    Value::Text("wsrep_sync_wait".into()),
                    Value::Text(wait.into()),
                ],
            ]
        };
        assert_eq!(reads_fresh(&[]), Ok(true), "MySQL 8: no such variables");
        assert_eq!(reads_fresh(&variables("OFF", "0")), Ok(true));
        assert_eq!(reads_fresh(&variables("ON", "0")), Ok(false));
        assert_eq!(reads_fresh(&variables("ON", "2")), Ok(false));
        assert_eq!(reads_fresh(&variables("ON", "1")), Ok(true));
        assert_eq!(reads_fresh(&variables("ON", "15")), Ok(true));
        assert!(reads_fresh(&variables("ON", "x")).is_err());
    }

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
        let ids = [5, 6, 7, 8, 9, 10, 11].map(OrderId::from_raw);
        let a = ids[0];
        let user = UserId::from_raw(1);
        let batch = [
            (a, user, 1),
            (ids[1], user, 1),
            (ids[2], user, 1),
            (ids[3], user, 1),
            (ids[4], user, 1),
            (ids[5], user, 1),
            (ids[6], user, 1),
        ];
        let row = |verdicts: &str| {
            vec![vec![
                Value::Text(verdicts.into()),
                Value::Int(1),
                Value::Int(12),
                Value::Int(1),
                Value::Int(3),
            ]]
        };
        // As the procedure writes them: one {"outcome", "order"} a purchase.
        let told = |verdicts: &str| {
            let told: Vec<String> = verdicts
                .split(',')
                .filter(|verdict| !verdict.is_empty())
                .map(|verdict| {
                    let (outcome, order) = verdict.split_once(':').unwrap_or((verdict, ""));
                    format!(r#"{{"outcome": "{outcome}", "order": "{order}", "units": 1}}"#)
                })
                .collect();
            row(&format!("[{}]", told.join(", ")))
        };
        let committed = committed(
            &batch,
            &told("ordered:5,duplicate:5,id_taken:7,elsewhere:5,cancelled:5,expired:5,sold_out:11"),
        )
        .unwrap();
        assert_eq!(
            committed.verdicts,
            [
                Verdict::Ordered,
                Verdict::Duplicate(a, 1),
                Verdict::IdTaken,
                Verdict::Elsewhere(a),
                Verdict::Cancelled(a),
                Verdict::Expired(a),
                Verdict::SoldOut
            ]
        );
        assert_eq!(
            committed.ledger,
            Ledger {
                orders: 1,
                returned_event: 12,
                stock: 3,
            }
        );
        assert_eq!(committed.created, 1);
        assert!(super::committed(&batch[..1], &told("ordered:5,sold_out:6")).is_err());
        for bad in [
            "ordered:5,duplicate:5,id_taken:7,elsewhere:5,cancelled:5,expired:5,sold_out:9",
            "ordered:6,duplicate:5,id_taken:7,elsewhere:5,cancelled:5,expired:5,sold_out:11",
            "ordered:5,duplicate:5,id_taken:7,elsewhere:5,cancelled:5,expired:5,other:8",
            "ordered:5,duplicate:5,id_taken:7,elsewhere:5,cancelled:5,expired:5,sold_out",
            "ordered:5,duplicate:x,id_taken:7,elsewhere:5,cancelled:5,expired:5,sold_out:11",
            "",
        ] {
            assert!(super::committed(&batch, &told(bad)).is_err(), "{bad}");
        }
        for bad in ["ordered:5,duplicate:5", "5:1:0,5:0:0", ""] {
            assert!(super::committed(&batch[..2], &row(bad)).is_err(), "{bad}");
        }
        let empty = super::committed(&[], &told("")).unwrap();
        assert_eq!(empty.verdicts, []);
        assert!(super::committed(&[], &[]).is_err(), "no row");
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
            Value::Int(900),
            Value::Int(0),
            Value::Int(2),
            Value::Int(12),
            Value::Int(4),
            Value::Int(7),
            Value::Null,
            Value::Int(7),
            Value::Int(1_690_000_000),
            Value::Int(1_699_999_000),
            Value::Int(1),
            Value::Int(3),
        ];
        let found = lookup(&[row.to_vec()], &[vec![Value::Int(9)]]).unwrap();
        assert_eq!(found.terms_version, 3);
        assert_eq!(found.spread, Spread::Whole);
        assert_eq!(found.created, 1_690_000_000);
        assert!(found.unlisted);
        let with = |columns: [Value; 3]| {
            let mut row = row.to_vec();
            row.splice(11..14, columns);
            lookup(&[row], &[vec![Value::Int(9)]]).unwrap().spread
        };
        let ids = |raw: &[u64]| -> Vec<BucketId> {
            raw.iter().map(|id| BucketId::from_raw(*id)).collect()
        };
        assert_eq!(
            with([Value::Int(7), Value::Text("8,9".into()), Value::Int(7)]),
            Spread::First(ids(&[8, 9]))
        );
        assert_eq!(
            with([Value::Int(7), Value::Null, Value::Int(8)]),
            Spread::BucketOf(SaleId::from_raw(7))
        );
        assert_eq!(
            found.ledger,
            Ledger {
                returned_event: 12,
                orders: 4,
                stock: 3,
            }
        );
        let terms = found.terms.unwrap();
        assert_eq!(
            (terms.stock, terms.initial_stock, terms.per_buyer),
            (3, 5, 2)
        );
        assert_eq!(terms.end_ms - terms.begin_ms, 60_000);
        assert_eq!(terms.announce_ms, 1_699_999_000_000);
        assert_eq!(highest(&[vec![Value::Null]]).unwrap(), None);
        assert_eq!(
            highest(&[vec![Value::Int(9)]]).unwrap(),
            Some(VoucherId::from_raw(9))
        );
    }
}

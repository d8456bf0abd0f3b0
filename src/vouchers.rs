//! Voucher routes: create (admin), read (public) and sync (admin).

use std::time::SystemTime;

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config;
use crate::db::{Db, NewVoucherRow, VoucherRow};
use crate::http::{json_body, Reply, Request};
use crate::request_log;
use seckill_core::sale::{Probe, Terms, View};
use seckill_core::ApiError;
use seckill_core::{OrderId, VoucherId};

use crate::sale::Sale;

pub const MAX_TITLE_CHARS: usize = 128;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_STOCK: i64 = 10_000_000;
/// Buyers read from MySQL per round trip during a sync.
const SYNC_PAGE: u32 = 1000;
/// How long a CDN or browser may reuse a voucher read: product pages poll it every second.
const VIEW_CACHE_CONTROL: &str = "public, max-age=1";
/// How long a cache may keep a voucher's `404`: a voucher created since is seen this late.
const NOT_FOUND_CACHE_CONTROL: &str = "public, max-age=5";

/// The body of `POST /vouchers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVoucher {
    title: String,
    #[serde(default)]
    description: Option<String>,
    stock: i64,
    begin_time: String,
    end_time: String,
}

/// A voucher as the API shows it.
#[derive(Debug, Serialize, PartialEq)]
pub struct VoucherView {
    id: VoucherId,
    title: String,
    description: String,
    /// The initial stock.
    stock: u64,
    remaining: u64,
    begin_time: String,
    end_time: String,
    status: &'static str,
    /// The clock `status` was decided by, to the millisecond: Redis's, which admission
    /// decides by, when the answer comes from Redis. A sale page counts down by it.
    server_time: String,
}

impl NewVoucher {
    /// Checks every field; times are kept to the second, as MySQL stores them.
    pub fn validate(&self) -> Result<NewVoucherRow<'_>, ApiError> {
        let bad = |message: String| Err(ApiError::BadRequest(message));
        let title_chars = self.title.chars().count();
        if self.title.trim().is_empty() || title_chars > MAX_TITLE_CHARS {
            return bad(format!("title must have 1 to {MAX_TITLE_CHARS} characters"));
        }
        let description = self.description.as_deref().unwrap_or("");
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            return bad(format!(
                "description must have at most {MAX_DESCRIPTION_CHARS} characters"
            ));
        }
        if !(1..=MAX_STOCK).contains(&self.stock) {
            return bad(format!("stock must be between 1 and {MAX_STOCK}"));
        }
        let begin = parse_time("begin_time", &self.begin_time)?;
        let end = parse_time("end_time", &self.end_time)?;
        if end <= begin {
            return bad("end_time must be after begin_time".into());
        }
        Ok(NewVoucherRow {
            title: &self.title,
            description,
            stock: self.stock as u64,
            begin,
            end,
        })
    }
}

fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, ApiError> {
    let invalid = || {
        ApiError::BadRequest(format!(
            "{field} must be an RFC 3339 time between 1970 and 9999, like 2030-01-01T12:00:00+08:00"
        ))
    };
    let at = DateTime::parse_from_rfc3339(text)
        .map_err(|_| invalid())?
        .with_timezone(&Utc);
    let whole_seconds = DateTime::from_timestamp(at.timestamp(), 0).ok_or_else(invalid)?;
    if whole_seconds.timestamp() < 0 || whole_seconds.year() > 9999 {
        return Err(invalid());
    }
    Ok(whole_seconds)
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl VoucherView {
    pub fn new(row: &VoucherRow, now: DateTime<Utc>) -> VoucherView {
        let status = if now < row.begin {
            "upcoming"
        } else if now >= row.end {
            "ended"
        } else if row.stock == 0 {
            "sold_out"
        } else {
            "live"
        };
        VoucherView {
            id: row.id,
            title: row.title.clone(),
            description: row.description.clone(),
            stock: row.initial_stock,
            remaining: row.stock,
            begin_time: rfc3339(row.begin),
            end_time: rfc3339(row.end),
            status,
            server_time: now.to_rfc3339_opts(SecondsFormat::Millis, true),
        }
    }

    /// The voucher as Redis holds it: `remaining` is what Redis can still hand out, and
    /// the status follows Redis's clock, as a purchase would be told.
    fn from_redis(id: VoucherId, view: &View) -> Option<VoucherView> {
        let terms = &view.terms;
        let at = |ms: i64| DateTime::from_timestamp_millis(ms);
        let row = VoucherRow {
            id,
            title: terms.title.clone(),
            description: terms.description.clone(),
            initial_stock: terms.initial_stock,
            stock: terms.stock,
            begin: at(terms.begin_ms)?,
            end: at(terms.end_ms)?,
        };
        Some(VoucherView::new(&row, at(view.now_ms)?))
    }
}

fn terms(row: &VoucherRow) -> Terms {
    Terms {
        stock: row.stock,
        begin_ms: row.begin.timestamp_millis(),
        end_ms: row.end.timestamp_millis(),
        initial_stock: row.initial_stock,
        title: row.title.clone(),
        description: row.description.clone(),
    }
}

fn now() -> DateTime<Utc> {
    DateTime::from(SystemTime::now())
}

/// `POST /vouchers`: writes MySQL, then preloads Redis; if the preload fails the voucher
/// is deleted again, from MySQL and (when Redis still answers) from Redis.
pub fn create(request: &Request) -> Result<Reply, ApiError> {
    let body: NewVoucher = json_body(request)?;
    let new = body.validate()?;
    let db = Db::connect(&config::mysql_url()?)?;
    // Reach Redis before writing anything, so that an unreachable Redis changes nothing.
    let sale = Sale::connect(&config::redis_url()?)?;
    let id = db.create_voucher(&new)?;
    request_log::note_voucher(id);
    let row = VoucherRow {
        id,
        title: new.title.to_string(),
        description: new.description.to_string(),
        initial_stock: new.stock,
        stock: new.stock,
        begin: new.begin,
        end: new.end,
    };
    if let Err(error) = sale.load_new(id, &terms(&row)) {
        if let Err(undo) = db.delete_voucher(id) {
            request_log::note_cause(format!(
                "in MySQL but not in Redis; POST /vouchers/{id}/sync loads it: {undo}"
            ));
        }
        // The load may have run with its reply lost: nothing may sell a deleted voucher.
        if let Err(undo) = sale.forget(id) {
            request_log::note_cause(format!("deleted; its Redis state may be left: {undo}"));
        }
        return Err(error.into());
    }
    Reply::json(201, VoucherView::new(&row, now()))
}

/// `GET /vouchers/{id}`: product pages poll this, so it answers from the voucher's Redis
/// sale state in one round trip. MySQL is asked only for an id Redis holds no sale for,
/// and then by one request a second for the whole route (every id of a flood of made-up
/// ones is new); the others hear `503` and retry. MySQL's "no such voucher" is kept in
/// Redis for a minute, and its `404` may be cached. When Redis cannot be reached, MySQL
/// answers each request.
pub fn get(id: VoucherId) -> Result<Reply, ApiError> {
    let sale = Sale::connect(&config::redis_url()?);
    match sale.as_ref().map(|sale| (sale, sale.view(id))) {
        Ok((_, Ok(Some(view)))) => {
            if let Some(view) = VoucherView::from_redis(id, &view) {
                return cacheable(view);
            }
        }
        Ok((sale, Ok(None))) => {
            if sale.is_absent(id)? {
                return not_found();
            }
            if !sale.may_ask_mysql(Probe::VoucherLookup)? {
                return Err(ApiError::Unavailable(
                    "the voucher is being looked up; retry in a second".into(),
                ));
            }
        }
        Ok((_, Err(error))) => {
            request_log::note_cause(format!("read from MySQL, Redis failed: {error}"))
        }
        Err(error) => {
            request_log::note_cause(format!("read from MySQL, Redis unreachable: {error}"))
        }
    }
    let db = Db::connect(&config::mysql_url()?)?;
    match db.voucher(id)? {
        Some(row) => cacheable(VoucherView::new(&row, now())),
        None => {
            if let Ok(sale) = &sale {
                if let Err(error) = sale.mark_absent(id) {
                    request_log::note_cause(format!("its absence not kept in Redis: {error}"));
                }
            }
            not_found()
        }
    }
}

/// A `404` a CDN may keep for a few seconds, so that a flood of made-up ids stops there.
fn not_found() -> Result<Reply, ApiError> {
    let mut reply = Reply::json(404, ApiError::NotFound.body())?;
    reply
        .headers
        .push(("cache-control", NOT_FOUND_CACHE_CONTROL.to_string()));
    Ok(reply)
}

fn cacheable(view: VoucherView) -> Result<Reply, ApiError> {
    let mut reply = Reply::json(200, view)?;
    reply
        .headers
        .push(("cache-control", VIEW_CACHE_CONTROL.to_string()));
    Ok(reply)
}

/// `POST /vouchers/{id}/sync`: rebuilds the voucher's Redis state from MySQL (stock,
/// window and buyers), for use after Redis lost data. One sync of a voucher runs at a
/// time (a lease in Redis); MySQL's buyers are merged page by page, and the terms
/// installed at the end, only while the sync still holds the lease.
pub fn sync(id: VoucherId) -> Result<Reply, ApiError> {
    let db = Db::connect(&config::mysql_url()?)?;
    let sale = Sale::connect(&config::redis_url()?)?;
    let row = db.voucher(id)?.ok_or(ApiError::NotFound)?;
    let token = Uuid::new_v4().to_string();
    sale.begin_load(id, &token)?;
    let mut after = OrderId::from_raw(0);
    loop {
        let page = db.buyers_page(id, after, SYNC_PAGE)?;
        sale.stage_buyers(id, &token, &page)?;
        match page.last() {
            Some((_, last)) if page.len() == SYNC_PAGE as usize => after = *last,
            _ => break,
        }
    }
    sale.finish_load(id, &token, &terms(&row))?;
    Reply::json(200, VoucherView::new(&row, now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voucher(json: &str) -> Result<NewVoucher, serde_json::Error> {
        serde_json::from_str(json)
    }

    fn valid() -> NewVoucher {
        voucher(
            r#"{"title":"100 元代金券","stock":50,"begin_time":"2030-01-01T08:00:00+08:00",
                "end_time":"2030-01-01T01:00:00.999Z","description":"flash"}"#,
        )
        .unwrap()
    }

    #[test]
    fn accepts_a_valid_voucher_and_normalises_times_to_utc_seconds() {
        let body = valid();
        let row = body.validate().unwrap();
        assert_eq!(row.title, "100 元代金券");
        assert_eq!(row.stock, 50);
        assert_eq!(rfc3339(row.begin), "2030-01-01T00:00:00Z");
        assert_eq!(rfc3339(row.end), "2030-01-01T01:00:00Z");
        assert_eq!(row.description, "flash");
    }

    #[test]
    fn rejects_each_bad_field() {
        let edits: [(&str, serde_json::Value); 10] = [
            ("title", "".into()),
            ("title", "   ".into()),
            ("title", "x".repeat(129).into()),
            ("description", "d".repeat(1025).into()),
            ("stock", 0.into()),
            ("stock", (-1).into()),
            ("stock", 10_000_001.into()),
            ("begin_time", "2030-01-01 00:00:00".into()),
            ("end_time", "2030-01-01T00:00:00Z".into()),
            ("begin_time", "1969-12-31T23:59:59Z".into()),
        ];
        for (field, value) in edits {
            let mut json = serde_json::json!({"title":"t","stock":5,
                "begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"});
            json[field] = value.clone();
            let body: NewVoucher = serde_json::from_value(json).unwrap();
            let error = body.validate().unwrap_err();
            assert_eq!(error.code(), "bad_request", "{field} = {value}");
        }
    }

    #[test]
    fn titles_count_characters_not_bytes() {
        let mut body = valid();
        body.title = "券".repeat(128);
        assert!(body.validate().is_ok());
        body.title.push('券');
        assert!(body.validate().is_err());
    }

    #[test]
    fn wrong_types_and_unknown_fields_do_not_parse() {
        for json in [
            r#"{"title":"t","stock":"5","begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":5.5,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":99999999999999999999,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":5,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z","user_id":"1"}"#,
            r#"{"title":"t","stock":5,"begin_time":"2030-01-01T00:00:00Z"}"#,
        ] {
            assert!(voucher(json).is_err(), "{json}");
        }
    }

    #[test]
    fn status_follows_the_window_and_the_stock() {
        let begin = DateTime::from_timestamp(1_000, 0).unwrap();
        let end = DateTime::from_timestamp(2_000, 0).unwrap();
        let mut row = VoucherRow {
            id: VoucherId::from_raw(1),
            title: "t".into(),
            description: String::new(),
            initial_stock: 5,
            stock: 5,
            begin,
            end,
        };
        let at = |s| DateTime::from_timestamp(s, 0).unwrap();
        assert_eq!(VoucherView::new(&row, at(999)).status, "upcoming");
        assert_eq!(VoucherView::new(&row, at(1_000)).status, "live");
        assert_eq!(VoucherView::new(&row, at(2_000)).status, "ended");
        row.stock = 0;
        assert_eq!(VoucherView::new(&row, at(1_500)).status, "sold_out");
        assert_eq!(VoucherView::new(&row, at(2_500)).status, "ended");
        let view = VoucherView::new(&row, at(1_500));
        assert_eq!((view.stock, view.remaining), (5, 0));
        assert_eq!(view.begin_time, "1970-01-01T00:16:40Z");
    }
}

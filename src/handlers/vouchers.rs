//! Voucher routes: create (admin), read (public) and sync (admin).

use std::time::SystemTime;

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::events;
use crate::error::Failure;
use crate::http::{json_body, page_params, Answer, Request, Then};
use crate::request_log;
use crate::storage::backends::{Backends, Connections};
use crate::storage::db::{Db, DbError, NewVoucherRow};
use crate::storage::redis::{Redis, RedisError};
use crate::storage::returns;
use seckill_core::buckets::{placed, Buckets, MAX_BUCKETS};
use seckill_core::drive;
use seckill_core::error::UnexpectedRow;
use seckill_core::ledger::Ledger;
use seckill_core::lookup::Found;
use seckill_core::purchase::Lookup;
use seckill_core::sale::{
    Clear, EndSale, Forget, Installer, KeepSummary, Load, ReadShare, ReadView, Share, Shown, Terms,
    Unlist, View, MOST_PER_BUYER,
};
use seckill_core::sync::VoucherSync;
use seckill_core::{ApiError, Unavailable};
use seckill_core::{BucketId, SaleId};

pub const MAX_TITLE_CHARS: usize = 128;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_STOCK: i64 = 10_000_000;
/// How long a winner has to pay, by default and at most (a week, as long as Redis keeps
/// a sale after its end).
pub const PAY_WITHIN_S: i64 = 900;
pub const MAX_PAY_WITHIN_S: i64 = 604_800;
/// The longest opening draw: a minute.
pub const MAX_DRAW_MS: i64 = 60_000;
/// The most units a sale with a draw may have: its units go out in the first seconds after
/// the draw, and a Redis Cluster slot hands out 262,144 order ids a second.
pub const MAX_DRAWN_STOCK: i64 = 100_000;
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
    #[serde(default)]
    pay_within_s: Option<i64>,
    /// Buckets to spread the stock over, on as many Redis Cluster slots (docs/design.md,
    /// "Buckets"): 1, the default, for all but the hottest sales.
    #[serde(default)]
    buckets: Option<i64>,
    /// An opening draw of this many milliseconds (docs/design.md, "The opening draw"): 0,
    /// the default, for first come, first served.
    #[serde(default)]
    draw_ms: Option<i64>,
    /// The most units one buyer may hold (docs/design.md, "Quantities"): 1, the default.
    #[serde(default)]
    per_buyer: Option<i64>,
    /// When the sale is listed (docs/design.md, "Unlisted until announced"): at its
    /// creation, the default.
    #[serde(default)]
    announce_at: Option<String>,
}

/// A voucher as the API shows it.
#[derive(Debug, Serialize, PartialEq)]
pub struct VoucherView {
    id: SaleId,
    title: String,
    description: String,
    /// The initial stock.
    stock: u64,
    remaining: u64,
    begin_time: String,
    end_time: String,
    status: &'static str,
    /// How long a winner has to pay before her order expires.
    pay_within_s: u64,
    /// The clock `status` was decided by, to the millisecond: Redis's, which admission
    /// decides by, when the answer comes from Redis. A sale page counts down by it.
    server_time: String,
    /// When the opening draw's window closes and its units go out, to the millisecond;
    /// `null` for a sale first come, first served.
    draw_at: Option<String>,
    /// The most units one buyer may hold.
    per_buyer: u64,
    /// When the sale is listed, to the second; `null` for a sale listed from its creation.
    announce_at: Option<String>,
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
        let pay_within_s = self.pay_within_s.unwrap_or(PAY_WITHIN_S);
        if !(1..=MAX_PAY_WITHIN_S).contains(&pay_within_s) {
            return bad(format!(
                "pay_within_s must be between 1 and {MAX_PAY_WITHIN_S}"
            ));
        }
        let buckets = self.buckets.unwrap_or(1);
        if !(1..=MAX_BUCKETS as i64).contains(&buckets) || buckets > self.stock {
            return bad(format!(
                "buckets must be between 1 and {MAX_BUCKETS}, and at most the stock"
            ));
        }
        let draw_ms = self.draw_ms.unwrap_or(0);
        if !(0..=MAX_DRAW_MS).contains(&draw_ms) {
            return bad(format!("draw_ms must be between 0 and {MAX_DRAW_MS}"));
        }
        if draw_ms > 0 && buckets > 1 {
            return bad("a sale with a draw_ms is one bucket: its draw ranks every entrant".into());
        }
        if draw_ms > 0 && self.stock > MAX_DRAWN_STOCK {
            return bad(format!(
                "a sale with a draw_ms has at most {MAX_DRAWN_STOCK} units"
            ));
        }
        let per_buyer = self.per_buyer.unwrap_or(1);
        if !(1..=i64::from(MOST_PER_BUYER)).contains(&per_buyer) {
            return bad(format!("per_buyer must be between 1 and {MOST_PER_BUYER}"));
        }
        let announce = match &self.announce_at {
            Some(text) => Some(parse_time("announce_at", text)?),
            None => None,
        };
        // A sale opens listed: none of its buyers presses a sale nobody can see.
        if announce.is_some_and(|announce| announce > begin) {
            return bad("announce_at must be at or before begin_time".into());
        }
        Ok(NewVoucherRow {
            title: &self.title,
            description,
            stock: self.stock as u64,
            begin,
            end,
            pay_within_s: pay_within_s as u64,
            buckets: buckets as u64,
            draw_ms: draw_ms as u64,
            per_buyer: per_buyer as u64,
            announce,
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
    /// The voucher with the status its terms have at `now_ms`: Redis's clock (the sale's,
    /// which admission decides by) when the terms come from Redis.
    pub fn new(id: SaleId, terms: &Terms, now_ms: i64) -> Option<VoucherView> {
        let at = |ms: i64| DateTime::from_timestamp_millis(ms);
        Some(VoucherView {
            id,
            title: terms.title.clone(),
            description: terms.description.clone(),
            stock: terms.initial_stock,
            remaining: terms.stock,
            begin_time: rfc3339(at(terms.begin_ms)?),
            end_time: rfc3339(at(terms.end_ms)?),
            status: terms.status(now_ms),
            pay_within_s: terms.pay_within_s,
            server_time: at(now_ms)?.to_rfc3339_opts(SecondsFormat::Millis, true),
            draw_at: match terms.draw_ms {
                0 => None,
                ms => Some(
                    at(terms.begin_ms + ms as i64)?.to_rfc3339_opts(SecondsFormat::Millis, true),
                ),
            },
            per_buyer: terms.per_buyer,
            announce_at: match terms.announce_ms {
                0 => None,
                ms => Some(rfc3339(at(ms)?)),
            },
        })
    }
}

fn now_ms() -> i64 {
    DateTime::<Utc>::from(SystemTime::now()).timestamp_millis()
}

/// The voucher as shown, or a `503` for terms no time can show (only a Redis written by
/// something else holds them).
fn view(id: SaleId, terms: &Terms, now_ms: i64) -> Result<VoucherView, ApiError> {
    VoucherView::new(id, terms, now_ms).ok_or(ApiError::Unavailable(Unavailable::TimesOutOfRange))
}

/// `POST /vouchers`: writes MySQL, then preloads Redis, each bucket with its share of the
/// stock; if a preload fails the voucher is deleted again, every bucket of it, from MySQL
/// and (when Redis still answers) from Redis.
pub async fn create(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let body: NewVoucher = json_body(request)?;
    let new = body.validate()?;
    let db = connections.mysql().await?;
    // Reach Redis before writing anything, so that an unreachable Redis changes nothing.
    let redis = connections.redis().await?;
    let (buckets, shares, created) = insert(db, redis, &new).await?;
    let id = buckets.sale();
    request_log::note_voucher(id);
    let highest = *buckets.all().iter().max().expect("a bucket at least");
    let mut total: Option<Terms> = None;
    let mut loaded = Ok(());
    let mut lost = Vec::new();
    for (&bucket, &share) in buckets.all().iter().zip(&shares) {
        let terms = Terms {
            stock: share,
            begin_ms: new.begin.timestamp_millis(),
            end_ms: new.end.timestamp_millis(),
            initial_stock: share,
            title: new.title.to_string(),
            description: new.description.to_string(),
            pay_within_s: new.pay_within_s,
            draw_ms: new.draw_ms,
            per_buyer: new.per_buyer,
            announce_ms: new.announce.map_or(0, |at| at.timestamp_millis()),
        };
        let load = Load {
            voucher_id: bucket,
            installer: Installer::Creation,
            terms: &terms,
            highest: highest.into(),
            created,
            ledger: Ledger::default(),
            spread: &buckets.spread_of(bucket),
        };
        // What Redis holds under a new id is a lost voucher's (MySQL handed the id out
        // again): none of it is this sale's, nor are the lost sale's other buckets.
        let clear = Clear::creation(bucket);
        loaded = match redis.call(&clear).await {
            Ok(cleared) => {
                lost.extend(clear.lost_buckets(&cleared, &buckets));
                redis.call(&load).await.map(drop)
            }
            Err(error) => Err(error),
        };
        if loaded.is_err() {
            break;
        }
        add_bucket(&mut total, terms);
    }
    if let Err(error) = loaded {
        undo_creation(db, redis, &buckets).await;
        return Err(error.into());
    }
    for clear in lost {
        if let Err(error) = redis.call(&clear).await {
            request_log::note_cause(format!(
                "bucket {} of a lost sale {id} left in Redis: {error}",
                clear.voucher_id
            ));
        }
    }
    let terms = total.expect("a bucket at least");
    Answer::json(201, view(id, &terms, now_ms())?)
}

/// How many times a creation places a sale's buckets over a Redis Cluster's primaries
/// before it takes MySQL's next ids instead (each time, a creation racing it took one).
const PLACEMENTS: usize = 3;

/// Writes the new sale to MySQL: on a Redis Cluster, a sale of several buckets under ids
/// whose slots spread it over the primaries (`buckets::placed`); else under MySQL's next
/// ids. Returns its buckets, their shares and when MySQL created it.
async fn insert(
    db: &Db,
    redis: &Redis,
    new: &NewVoucherRow<'_>,
) -> Result<(Buckets, Vec<u64>, i64), Failure> {
    if new.buckets > 1 {
        if let Some(map) = redis.slot_map().await.map_err(RedisError::from)? {
            for _ in 0..PLACEMENTS {
                let first = db.highest_voucher().await?.map_or(1, |id| id.raw() + 1);
                let ids = placed(SaleId::from_raw(first), new.buckets, &map);
                if let Some(created) = db.create_voucher(new, Some(&ids)).await? {
                    return Ok(created);
                }
            }
        }
    }
    let created = db.create_voucher(new, None).await?;
    Ok(created.ok_or_else(|| DbError::from(UnexpectedRow("no bucket created".into())))?)
}

/// Deletes a voucher whose preload failed, every bucket of it, from MySQL and Redis.
async fn undo_creation(db: &Db, redis: &Redis, buckets: &Buckets) {
    for &id in buckets.all() {
        if let Err(undo) = db.delete_voucher(id).await {
            request_log::note_cause(format!(
                "in MySQL but not in Redis; POST /vouchers/{id}/sync loads it: {undo}"
            ));
        }
        // The load may have run with its reply lost: nothing may sell a deleted voucher.
        let forgotten = match redis.call(&Forget { voucher_id: id }).await {
            Ok(()) => redis.call(&Unlist { voucher_id: id }).await,
            Err(error) => Err(error),
        };
        if let Err(undo) = forgotten {
            request_log::note_cause(format!("deleted; its Redis state may be left: {undo}"));
        }
    }
}

/// Adds a bucket's terms to the sale's: the page shows the stock of every bucket.
fn add_bucket(total: &mut Option<Terms>, bucket: Terms) {
    match total {
        Some(total) => {
            total.stock += bucket.stock;
            total.initial_stock += bucket.initial_stock;
        }
        None => *total = Some(bucket),
    }
}

/// `GET /vouchers/{id}`: product pages poll this, so it answers from the voucher's Redis
/// sale state in one round trip, whatever the sale's buckets (the one reader a second that
/// sums the other buckets aside, [`with_others`]). MySQL is asked only for an id Redis
/// holds no sale for and knows nothing of, by one request a second for this route and
/// purchases together per lookup slot (`Probe::VoucherLookup`: every id of a flood of
/// made-up ones is new); the others of the slot hear `503` and retry. What MySQL said is
/// kept in Redis (the highest id, an absence for a minute), and a `404` may be cached.
/// Without Redis it answers `503`: nothing would bound MySQL's load. A query string is
/// refused before anything is read: a cache in front keys pages by their whole address,
/// and `?<anything>` would pass it.
pub async fn get(
    id: SaleId,
    request: &Request,
    mut connections: Connections,
) -> Result<Answer, Failure> {
    if !request.query.is_empty() {
        return Err(ApiError::BadRequest("a voucher's page takes no query string".into()).into());
    }
    let redis = connections.redis().await?;
    let first = id.first_bucket();
    match redis.call(&ReadView { voucher_id: first }).await? {
        Shown::Sale(shown) => {
            let terms = with_others(redis, id, &shown).await?;
            let mut answer = cacheable(view(id, &terms, shown.now_ms)?)?;
            let own = shown.sweep.then_some(first);
            if own.is_some() || shown.audit.is_some() {
                answer.then = Some(Then::new(sweep_after(connections, own, shown.audit)));
            }
            return Ok(answer);
        }
        Shown::Unknown => return not_found(),
        Shown::Missing => {}
    }
    let (found, lookup) = drive::look_up(&mut connections.port().await?, first).await;
    for cause in lookup.causes() {
        request_log::note_cause(cause.clone());
    }
    match found {
        Found::Unknown => not_found(),
        Found::NotNow => Err(ApiError::Unavailable(Unavailable::VoucherLookup).into()),
        // A sale that ended so long ago that Redis let it expire is shown from Redis again.
        // A later bucket of a sale is no voucher of its own (view.lua's "sale").
        Found::Sale { sale: Some(_), .. } => not_found(),
        Found::Sale {
            terms, restored, ..
        } => {
            if let Err(error) = restored {
                request_log::note_cause(format!("an ended sale not restored in Redis: {error}"));
            }
            cacheable(view(id, &terms, now_ms())?)
        }
        Found::Failed(error) => Err(error.into()),
    }
}

/// A `404` a CDN may keep for a few seconds, so that a flood of made-up ids stops there.
fn not_found() -> Result<Answer, Failure> {
    let mut reply = Answer::json(404, ApiError::NotFound.body())?;
    reply
        .headers
        .push(("cache-control", NOT_FOUND_CACHE_CONTROL.to_string()));
    Ok(reply)
}

/// The sale's terms with the stock of every bucket: the first bucket's, and the others'
/// as a reader summed them within the last second. The one reader a second that view.lua
/// names sums them again (a read of each bucket) and keeps the sum; so do the readers
/// of a sale whose sum is not kept yet.
async fn with_others(redis: &Redis, id: SaleId, shown: &View) -> Result<Terms, Failure> {
    let mut terms = shown.terms.clone();
    let others = match shown.summary {
        Some(summary) if !shown.refresh => summary,
        _ => {
            let mut sum = Share::default();
            for &bucket in &shown.others {
                match redis.call(&ReadShare { voucher_id: bucket }).await? {
                    Some(share) => sum += share,
                    // Its buyers' presses find out, and a sync loads it again.
                    None => request_log::note_cause(format!(
                        "bucket {bucket} not in Redis: POST /vouchers/{id}/sync"
                    )),
                }
            }
            if !shown.others.is_empty() {
                let keep = KeepSummary {
                    voucher_id: id.first_bucket(),
                    others: sum,
                };
                if let Err(error) = redis.call(&keep).await {
                    request_log::note_cause(format!("a sale's summary not kept: {error}"));
                }
            }
            sum
        }
    };
    terms.stock += others.stock;
    terms.initial_stock += others.initial_stock;
    Ok(terms)
}

/// The sweeps a product page's read took the leases for (view.lua: the first bucket's),
/// and the audit of the other bucket whose turn it was (under that bucket's lease), as
/// work after its answer: the page shows the sale as it stood, and does not wait for
/// MySQL in the default build.
async fn sweep_after(connections: Connections, own: Option<BucketId>, audit: Option<BucketId>) {
    let connected =
        async { Ok::<_, Failure>((connections.redis().await?, connections.mysql().await?)) };
    let (redis, db) = match connected.await {
        Ok(both) => both,
        Err(error) => {
            return request_log::note_cause(format!("sweeping expired orders: {error}"));
        }
    };
    if let Some(bucket) = own {
        if let Err(cause) = returns::sweep(db, redis, bucket).await {
            request_log::note_cause(format!("sweeping expired orders: {cause}"));
        }
    }
    if let Some(bucket) = audit {
        returns::sweep_unless_busy(db, redis, bucket).await;
    }
}

fn cacheable(view: VoucherView) -> Result<Answer, Failure> {
    let mut reply = Answer::json(200, view)?;
    reply
        .headers
        .push(("cache-control", VIEW_CACHE_CONTROL.to_string()));
    Ok(reply)
}

/// `POST /vouchers/{id}/sync`: rebuilds the voucher's Redis state from MySQL (stock,
/// window and buyers) after Redis lost data, a bucket at a time; the steps and their
/// reasons are `seckill_core::sync`, run here on Spin's Redis and MySQL.
pub async fn sync(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let db = connections.mysql().await?;
    let redis = connections.redis().await?;
    let mut buckets = vec![id.first_bucket()];
    let mut total = None;
    while let Some(bucket) = buckets.pop() {
        let (mut sync, io) = VoucherSync::start(bucket, Uuid::new_v4().to_string());
        let answer = drive::sync(&mut Backends::with(redis, db), bucket, &mut sync, io).await;
        for cause in sync.causes() {
            request_log::note_cause(cause);
        }
        add_bucket(&mut total, answer?);
        if bucket == id.first_bucket() {
            buckets.extend(sync.spread().buckets(id).all().iter().skip(1));
        }
    }
    let terms = total.expect("the first bucket");
    Answer::json(200, view(id, &terms, now_ms())?)
}

/// `POST /vouchers/{id}/end`: the sale ends now, in MySQL and in Redis. A new buyer then
/// hears `ended`, a buyer with an order still hears it, and purchases already queued are
/// still committed.
pub async fn end(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let db = connections.mysql().await?;
    let redis = connections.redis().await?;
    let Lookup { terms, spread, .. } = db.lookup(id.first_bucket()).await?;
    let mut terms = terms.ok_or(ApiError::NotFound)?;
    db.end_sale(id).await?;
    for &bucket in spread.buckets(id).all() {
        if !redis.call(&EndSale { voucher_id: bucket }).await? {
            request_log::note_cause(format!(
                "no sale state in Redis for {bucket}; POST /vouchers/{id}/sync installs the ended window"
            ));
        }
    }
    // The window as MySQL now holds it, to the second.
    let now = now_ms();
    let ended_at = now - now.rem_euclid(1000);
    terms.begin_ms = terms.begin_ms.min(ended_at);
    terms.end_ms = terms.end_ms.min(ended_at);
    Answer::json(200, view(id, &terms, now)?)
}

/// `POST /vouchers/{id}/expire`: expires the voucher's unpaid orders past their deadline
/// now and gives their units back to the sale, for a scheduler that wants it done on
/// time, under each bucket's sweep lease (after a sweep under way). A sale does not
/// depend on it: returns also ride on the requests it gets.
pub async fn expire(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let db = connections.mysql().await?;
    let redis = connections.redis().await?;
    let Lookup { terms, spread, .. } = db.lookup(id.first_bucket()).await?;
    terms.ok_or(ApiError::NotFound)?;
    let mut given = 0;
    for &bucket in spread.buckets(id).all() {
        given += returns::sweep_in_turn(db, redis, bucket)
            .await
            .map_err(|cause| {
                request_log::note_cause(cause);
                ApiError::Unavailable(Unavailable::SweepUnfinished)
            })?;
    }
    Answer::json(200, serde_json::json!({ "units_returned": given }))
}

/// `GET /vouchers?after=&limit=`: the merchant's vouchers, newest first, each as MySQL
/// holds it (`remaining` is MySQL's stock, its status by this host's clock); `next` is
/// the `after` of the next page, `null` after the last.
pub async fn list(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let (after, limit) = page_params(request, events::DEFAULT_LIMIT, events::MAX_LIMIT)?;
    let db = connections.mysql().await?;
    let page = db.vouchers(after.unwrap_or(u64::MAX), limit).await?;
    let now = now_ms();
    let vouchers = page
        .iter()
        .map(|(id, terms)| view(*id, terms, now))
        .collect::<Result<Vec<_>, _>>()?;
    let next = match page.last() {
        Some((id, _)) if page.len() == limit as usize => Some(id.to_string()),
        _ => None,
    };
    Answer::json(
        200,
        serde_json::json!({ "vouchers": vouchers, "next": next }),
    )
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
        let edits: [(&str, serde_json::Value); 15] = [
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
            ("per_buyer", 0.into()),
            ("per_buyer", 11.into()),
            ("per_buyer", (-2).into()),
            ("announce_at", "2030-01-01T00:00:01Z".into()),
            ("announce_at", "tomorrow".into()),
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
    fn a_view_shows_all_the_units_and_those_left() {
        let terms = Terms {
            stock: 0,
            ..Terms::sample(5, 5, 1_000_000, 2_000_000)
        };
        let view = VoucherView::new(SaleId::from_raw(1), &terms, 1_500_000).unwrap();
        assert_eq!(
            (view.stock, view.remaining, view.status),
            (5, 0, "sold_out")
        );
        assert_eq!(view.begin_time, "1970-01-01T00:16:40Z");
    }
}

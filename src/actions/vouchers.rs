//! Vouchers on the request's connections: a sale created in MySQL and loaded into Redis
//! (or undone), read from Redis (MySQL looked up only for a sale Redis lost), synced
//! into Redis again, ended, its overdue orders expired, and the merchant's list.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::Failure;
use crate::request_log;
use crate::storage::connections::{Connections, Port};
use crate::storage::db::{Db, DbError, NewVoucherRow};
use crate::storage::redis::{Redis, RedisError};
use crate::storage::returns;
use seckill_core::buckets::{placed, Buckets};
use seckill_core::drive;
use seckill_core::error::UnexpectedRow;
use seckill_core::ledger::Ledger;
use seckill_core::lookup::Found;
use seckill_core::purchase::Lookup;
use seckill_core::sale::{
    ChangeTerms, Changed, Clear, EndSale, Forget, Installer, KeepSummary, Load, ReadShare,
    ReadView, Share, Shown, Terms, Unlist, View,
};
use seckill_core::sql::{Listed, SaleChange};
use seckill_core::sync::VoucherSync;
use seckill_core::{ApiError, Unavailable};
use seckill_core::{BucketId, SaleId};

/// This host's clock, in milliseconds: what a sale's status is read at when its terms do
/// not come from Redis.
pub fn now_ms() -> i64 {
    DateTime::<Utc>::from(SystemTime::now()).timestamp_millis()
}

/// Writes the new sale to MySQL, then preloads Redis, each bucket with its share of the
/// stock; if a preload fails the voucher is deleted again, every bucket of it, from MySQL
/// and (when Redis still answers) from Redis. Returns the sale and its terms, with the
/// stock of every bucket.
pub async fn create(
    new: &NewVoucherRow,
    connections: &Connections,
) -> Result<(SaleId, Terms), Failure> {
    let db = connections.mysql().await?;
    // Reach Redis before writing anything, so that an unreachable Redis changes nothing.
    let redis = connections.redis().await?;
    let (buckets, shares, created) = insert(db, redis, new).await?;
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
            title: new.title.clone(),
            description: new.description.clone(),
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
            terms_version: 0,
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
    Ok((id, total.expect("a bucket at least")))
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
    new: &NewVoucherRow,
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

/// A voucher read: the sale's terms with the stock of every bucket, the clock its status
/// is read at (Redis's, which admission decides by, when the terms come from Redis), and
/// the sweeps the read took the leases for, to run once it is answered.
pub struct Read {
    pub terms: Terms,
    pub now_ms: i64,
    pub sweeps: Option<Sweeps>,
}

/// Reads the voucher from its Redis sale state in one round trip, whatever the sale's
/// buckets (the one reader a second that sums the other buckets aside, [`with_others`]).
/// MySQL is asked only for an id Redis holds no sale for and knows nothing of, by one
/// request a second for this read and purchases together per lookup slot
/// (`Probe::VoucherLookup`: every id of a flood of made-up ones is new); the others of
/// the slot are refused with [`Unavailable::VoucherLookup`] and retry. What MySQL said is
/// kept in Redis (the highest id, an absence for a minute). `None` for no voucher a
/// public route takes: a made-up id, one not listed yet, or a later bucket of a sale.
/// Without Redis it fails: nothing would bound MySQL's load.
pub async fn read(id: SaleId, mut connections: Connections) -> Result<Option<Read>, Failure> {
    let redis = connections.redis().await?;
    let first = id.first_bucket();
    match redis.call(&ReadView { voucher_id: first }).await? {
        Shown::Sale(shown) => {
            let terms = with_others(redis, id, &shown).await?;
            let own = shown.sweep.then_some(first);
            let sweeps = (own.is_some() || shown.audit.is_some()).then(|| Sweeps {
                connections,
                own,
                audit: shown.audit,
            });
            return Ok(Some(Read {
                terms,
                now_ms: shown.now_ms,
                sweeps,
            }));
        }
        Shown::Unknown => return Ok(None),
        Shown::Missing => {}
    }
    let (found, lookup) = drive::look_up(&mut connections.port().await?, first).await;
    for cause in lookup.causes() {
        request_log::note_cause(cause.clone());
    }
    match found {
        Found::Unknown => Ok(None),
        Found::NotNow => Err(ApiError::Unavailable(Unavailable::VoucherLookup).into()),
        // A sale that ended so long ago that Redis let it expire is shown from Redis again.
        // A later bucket of a sale is no voucher of its own (view.lua's "sale").
        Found::Sale { sale: Some(_), .. } => Ok(None),
        Found::Sale {
            terms, restored, ..
        } => {
            if let Err(error) = restored {
                request_log::note_cause(format!("an ended sale not restored in Redis: {error}"));
            }
            Ok(Some(Read {
                terms,
                now_ms: now_ms(),
                sweeps: None,
            }))
        }
        Found::Failed(error) => Err(error.into()),
    }
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

/// The sweeps a read took the leases for (view.lua: the first bucket's), and the audit of
/// the other bucket whose turn it was (under that bucket's lease), on the read's
/// connections: work after its answer, so that the page shows the sale as it stood and
/// does not wait for MySQL in the default build.
pub struct Sweeps {
    connections: Connections,
    own: Option<BucketId>,
    audit: Option<BucketId>,
}

impl Sweeps {
    pub async fn run(self) {
        let Sweeps {
            connections,
            own,
            audit,
        } = self;
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
}

/// Rebuilds the voucher's Redis state from MySQL (stock, window and buyers) after Redis
/// lost data, a bucket at a time; the steps and their reasons are `seckill_core::sync`,
/// run here on Spin's Redis and MySQL. Returns the sale's terms, every bucket's stock.
pub async fn sync(id: SaleId, connections: &Connections) -> Result<Terms, Failure> {
    let db = connections.mysql().await?;
    let redis = connections.redis().await?;
    let mut buckets = vec![id.first_bucket()];
    let mut total = None;
    while let Some(bucket) = buckets.pop() {
        let (mut sync, io) = VoucherSync::start(bucket, Uuid::new_v4().to_string());
        let answer = drive::sync(&mut Port::with(redis, db), bucket, &mut sync, io).await;
        for cause in sync.causes() {
            request_log::note_cause(cause);
        }
        add_bucket(&mut total, answer?);
        if bucket == id.first_bucket() {
            buckets.extend(sync.spread().buckets(id).all().iter().skip(1));
        }
    }
    Ok(total.expect("the first bucket"))
}

/// Ends the sale now, in MySQL and in Redis. A new buyer then hears `ended`, a buyer with
/// an order still hears it, and purchases already queued are still committed. Returns
/// its terms with the window as MySQL now holds it, to the second, and the clock they
/// were read at.
pub async fn end(id: SaleId, connections: &Connections) -> Result<(Terms, i64), Failure> {
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
    let now = now_ms();
    let ended_at = now - now.rem_euclid(1000);
    terms.begin_ms = terms.begin_ms.min(ended_at);
    terms.end_ms = terms.end_ms.min(ended_at);
    Ok((terms, now))
}

/// Expires the voucher's unpaid orders past their deadline now and gives their units
/// back to the sale, for a scheduler that wants it done on time, under each bucket's
/// sweep lease (after a sweep under way). A sale does not depend on it: returns also
/// ride on the requests it gets. Returns the units given back.
pub async fn expire(id: SaleId, connections: &Connections) -> Result<u64, Failure> {
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
    Ok(given)
}

/// The merchant's sales below the id `before`, newest first, `limit` at most, each as
/// MySQL holds it (its stock MySQL's).
pub async fn list(
    before: u64,
    limit: u32,
    connections: &Connections,
) -> Result<Vec<Listed>, Failure> {
    let db = connections.mysql().await?;
    Ok(db.vouchers(before, limit).await?)
}

/// How long before its begin a sale stops taking the changes only an unopened sale may
/// take: MySQL decides by its clock, Redis by its own (lua/change.lua), and the two may
/// disagree by this much without a press meeting terms MySQL no longer holds.
pub const CHANGE_GUARD_S: u64 = 5;
/// How many times a change reads the sale again when another change or an end went
/// first.
const CHANGE_TRIES: usize = 3;

/// Changes the sale as `decide` makes of its terms as MySQL holds them (the new terms,
/// and whether they need it unopened; `None`: nothing changes), in MySQL if they are
/// still as read (`seckill_change_sale`, which also decides its opening, by MySQL's
/// clock), then in Redis, every bucket: the terms (`lua/change.lua`), and the units a
/// restock added (`lua/restock.lua`, by their events, so each reaches the sale once).
/// Redis is told even when nothing changes: the same change asked again after a failure
/// gives Redis what MySQL holds. Returns the sale as listed after it.
pub async fn change(
    id: SaleId,
    decide: impl Fn(&Listed, i64) -> Result<Option<(NewVoucherRow, bool)>, ApiError>,
    connections: &Connections,
) -> Result<Listed, Failure> {
    let db = connections.mysql().await?;
    // Reach Redis before writing anything, so that an unreachable Redis changes nothing.
    let redis = connections.redis().await?;
    let mut tries = 0;
    loop {
        let current = db.sale(id).await?.ok_or(ApiError::NotFound)?;
        let Some((terms, reshape)) = decide(&current, now_ms())? else {
            break;
        };
        let version = current.terms_version;
        match db
            .change_sale(id, version, reshape, CHANGE_GUARD_S, &terms)
            .await?
        {
            SaleChange::Changed(_) => break,
            SaleChange::Missing => return Err(ApiError::NotFound.into()),
            SaleChange::Ended => {
                return Err(ApiError::CannotChange {
                    field: "end_time",
                    message: "the sale has ended: only its title and description may change".into(),
                }
                .into())
            }
            // Opened since it was read: decided again, it says which field.
            SaleChange::Stale | SaleChange::Open if tries + 1 < CHANGE_TRIES => tries += 1,
            SaleChange::Stale | SaleChange::Open => return Err(ApiError::CannotChange {
                field: "begin_time",
                message:
                    "the sale changed or opened while this change was made; read it and try again"
                        .into(),
            }
            .into()),
        }
    }
    let Lookup { spread, .. } = db.lookup(id.first_bucket()).await?;
    for &bucket in spread.buckets(id).all() {
        install(db, redis, id, bucket).await?;
    }
    Ok(db.sale(id).await?.ok_or(ApiError::NotFound)?)
}

/// The bucket's terms as MySQL holds them, into Redis, then the units MySQL gave it that
/// Redis has not seen. Its units are set only where Redis holds it unbegun and unsold
/// (change.lua): once open they arrive as restocks.
async fn install(db: &Db, redis: &Redis, id: SaleId, bucket: BucketId) -> Result<(), Failure> {
    let Lookup {
        terms,
        terms_version,
        ledger,
        ..
    } = db.lookup(bucket).await?;
    let terms = terms.ok_or(ApiError::NotFound)?;
    let change = ChangeTerms {
        voucher_id: bucket,
        terms: &terms,
        terms_version,
        returned_event: ledger.returned_event,
    };
    if redis.call(&change).await? == Changed::Missing {
        request_log::note_cause(format!(
            "no sale state in Redis for {bucket}; POST /vouchers/{id}/sync installs the changed terms"
        ));
        return Ok(());
    }
    returns::give_back(db, redis, bucket).await?;
    Ok(())
}

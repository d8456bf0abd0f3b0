//! Where a voucher's sale lives in Redis, and the limits the scripts are given.
//!
//! Every script's keys sit in one slot of a Redis Cluster: a voucher's share the hash tag
//! `{<voucher id>}`, and on a cluster those all the vouchers of a slot share (the order
//! sequence, the highest voucher id) the slot's own tag (`redis_cluster::slot_tag`), which
//! hashes there too. On one Redis these are one key each for the whole deployment, so
//! that what one voucher's creation teaches (the highest id) holds for every id.
//! The sets of vouchers (`VOUCHERS`, `STALE`, `MYSQL_BEHIND`) and the health probe's key
//! are each a key of its own, which no script touches (`listings`); see docs/design.md.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ids::BucketId;
use crate::redis_cluster::{key_slot, slot_tag};

use super::Entry;

/// The set of the vouchers Redis holds a sale for: what `GET /metrics` reports on.
pub const VOUCHERS: &str = "seckill:vouchers";
/// The set of the vouchers whose Redis sale state was found behind MySQL: each waits for
/// an admin's sync (`GET /health` lists them).
pub const STALE: &str = "seckill:stale";
/// The set of the vouchers whose MySQL lacks orders Redis learnt of (a failover to a
/// lagging replica): each is healed by its next sweep (`GET /health` lists them).
pub const MYSQL_BEHIND: &str = "seckill:mysql-behind";
/// The highest voucher id MySQL is known to have handed out, for the whole deployment:
/// ids are `AUTO_INCREMENT`, so any id above it is unknown without asking MySQL. It shares
/// its hash tag with the lookup probe (`sale::AskMysql` reads both).
pub const HIGHEST_VOUCHER: &str = "seckill:{seckill}:highest-voucher";
/// What the last `/health` probe found of MySQL, and how long it is worth reporting: a
/// probe runs once a second while health is asked, so this outlives a few missed ones.
pub const MYSQL_HEALTH: &str = "seckill:health:mysql";
/// What the last `/health` probe found of MySQL's reads on a Galera cluster ("fresh" or
/// "may_lag"), kept as long as [`MYSQL_HEALTH`].
pub const MYSQL_READS: &str = "seckill:health:mysql-reads";
pub const MYSQL_HEALTH_MS: i64 = 5_000;
/// How long after its end `GET /metrics` still reports a sale: long enough for the last
/// scrapes to see its final figures, short enough that a scrape stays small.
pub const REPORTED_AFTER_END_MS: i64 = 3_600_000;
/// How long Redis keeps MySQL's word that a voucher does not exist.
pub const ABSENT_MS: i64 = 60_000;
/// How long a sync holds the voucher's sync lease after its last page: a sync that died
/// blocks the next one no longer than this.
pub const SYNC_LEASE_MS: i64 = 60_000;
/// How long a drainer's lock on the queue (its lease) lives without a batch published:
/// a drainer that died holds the queue up no longer than this.
pub const LEASE_MS: i64 = 2_000;
/// How long a lease handed on lives until its new holder takes it up: its request may
/// have gone.
pub const HANDOVER_MS: i64 = 500;
/// How long a turn at settling orders lives without being handed on: a settle that died
/// holds its slot's others up no longer than this.
pub const SETTLE_TURN_MS: i64 = 2_000;
/// How long a sale's Redis state outlives its end, or its last load when that came later:
/// buyers pressing late still hear their order from Redis, and then the keys expire
/// (`GET /vouchers/{id}/orders/mine` and the order routes read MySQL, which keeps
/// everything). Keys a script writes while the voucher's terms are missing (after Redis
/// lost them) expire this long after they were written.
pub const KEPT_AFTER_END_MS: i64 = 7 * 24 * 3_600_000;
/// How long a sweep of expired orders holds the voucher's sweep lease: one that died
/// delays the next no longer than this.
pub const SWEEP_MS: i64 = 5_000;
/// How often a sale that is pressed or read sweeps, and so audits MySQL's orders, with no
/// deadline due: a loss of orders is found within this of the next press or read.
pub const AUDIT_MS: i64 = 5_000;
/// Most purchases committed in one MySQL transaction.
pub const BATCH: i64 = 256;
/// Most of the opening draw's entrants one press hands units to: each such press is a
/// script of about 4 ms (BENCHMARKS.md), and a draw of 100,000 units is handed out by the
/// first 391 presses after it.
pub const DRAW_BATCH: i64 = 256;
/// How long after a sale's line opens (its first join) a join's place is drawn at random,
/// as a draw's entry is: the buyers told `sold_out` in one moment stand equal, however fast
/// each joined; a later join goes to the back (docs/design.md, "The line").
pub const LINE_WINDOW_MS: i64 = 10_000;
/// How long units given back wait for the first in line who asks for more than came back,
/// once a unit went past her to one behind her who fits it (docs/design.md, "The line"):
/// they gather for her meanwhile, and past it go on, so that neither she nor they wait
/// for good.
pub const LINE_HOLD_MS: i64 = 30_000;
/// Most units a sale may let one buyer hold (`per_buyer`, docs/design.md, "Quantities"):
/// the draw keeps a line for each quantity (`Keys::lines`).
pub const MOST_PER_BUYER: u32 = 10;
/// Most purchases queued at once: past it buyers hear `throttled`. Each queued purchase
/// has a request waiting on it, and a host serves a bounded number of requests at once
/// (`SPIN_MAX_INSTANCE_COUNT`, 5,000 in this project's serve command): the limit sits
/// above that, so that no crowd one host can hold meets it; it bounds what several hosts
/// queue together (32 batches: about a second's wait).
pub const MAX_QUEUED: i64 = 8192;

/// How many purchases a drainer takes at once and may be queued at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most purchases committed in one MySQL transaction.
    pub batch: i64,
    /// Most purchases queued at once: past it buyers hear `throttled`.
    pub max_queued: i64,
    /// Most of the opening draw's entrants one press hands units to.
    pub draw_batch: i64,
}

impl Limits {
    /// The component's.
    pub const SHIPPED: Limits = Limits {
        batch: BATCH,
        max_queued: MAX_QUEUED,
        draw_batch: DRAW_BATCH,
    };
}

/// Whether the sales live on a Redis Cluster: set once, by the component's settings.
static ON_A_CLUSTER: AtomicBool = AtomicBool::new(false);

/// Places the keys every voucher of a slot shares in that slot from now on.
pub fn place_keys_for_a_cluster() {
    ON_A_CLUSTER.store(true, Ordering::Relaxed);
}

/// The keys of one bucket's sale state (a sale of one bucket: the sale's).
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    voucher_id: BucketId,
    on_a_cluster: bool,
}

impl Keys {
    pub fn new(voucher_id: BucketId) -> Keys {
        Keys {
            voucher_id,
            on_a_cluster: ON_A_CLUSTER.load(Ordering::Relaxed),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("seckill:{{{}}}:{name}", self.voucher_id)
    }

    /// The Redis Cluster slot of the voucher's keys.
    pub fn slot(&self) -> u16 {
        key_slot(self.voucher_id.to_string().as_bytes())
    }

    /// A key every voucher of this one's slot shares: the whole deployment's on one Redis.
    fn shared_key(&self, name: &str) -> String {
        if self.on_a_cluster {
            format!("seckill:{{{}}}:{name}", slot_tag(self.slot()))
        } else {
            format!("seckill:{name}")
        }
    }

    /// The prefix of the order sequence keys, one a second
    /// (`seckill:order-seq:<unix seconds>`; a slot's own on a cluster,
    /// `seckill:{<slot tag>}:order-seq:<unix seconds>`).
    pub fn order_sequence(&self) -> String {
        self.shared_key("order-seq")
    }

    /// The highest voucher id the scripts of this voucher read: [`HIGHEST_VOUCHER`] on one
    /// Redis, the slot's own copy on a cluster (which a slot learns from its vouchers'
    /// creations and lookups, and from [`HIGHEST_VOUCHER`] when it knows nothing).
    pub fn highest_voucher(&self) -> String {
        if self.on_a_cluster {
            self.shared_key("highest-voucher")
        } else {
            HIGHEST_VOUCHER.to_string()
        }
    }

    /// Hash with `stock`, `begin_ms`, `end_ms`, `initial_stock`, `title`, `description`,
    /// `orders` (the orders Redis recorded), `clock_ms` (the latest time admission
    /// decided by: the sale's clock never goes back) and `stale` (found behind MySQL).
    pub fn voucher(&self) -> String {
        self.key("voucher")
    }

    /// Hash from user id to `q:<ticket>` (queued) or `o:<order id>` (committed).
    pub fn buyers(&self) -> String {
        self.key("buyers")
    }

    /// List of the queued purchases, `<user id>:<ticket>`, oldest first.
    pub fn queue(&self) -> String {
        self.key("queue")
    }

    /// The drain lock: the token of the one request draining the queue into MySQL.
    pub fn lease(&self) -> String {
        self.key("lease")
    }

    /// The prefix of each queued purchase's outcome list (`done:<user id>:<ticket>`).
    pub fn done_prefix(&self) -> String {
        self.key("done:")
    }

    /// The outcome list of the queued purchase `entry`.
    pub fn done(&self, entry: Entry) -> String {
        format!("{}{entry}", self.done_prefix())
    }

    /// The voucher's sync lease: the token of the one sync allowed to run.
    pub fn sync_lease(&self) -> String {
        self.key("sync")
    }

    /// Set while MySQL's word that no such voucher exists holds (a minute).
    pub fn absent(&self) -> String {
        self.key("absent")
    }

    /// Held by the one request sweeping the voucher's expired orders (a few seconds).
    pub fn sweep(&self) -> String {
        self.key("sweep")
    }

    /// "<stock>,<initial stock>" of a sale's other buckets, beside its first, as the one
    /// reader a second summing them left it (`lua/view.lua`): a page costs one script.
    pub fn summary(&self) -> String {
        self.key("summary")
    }

    /// Sorted set of the opening draw's entrants who asked for `units` units and were not
    /// handed them yet, by their places: the draw's line of that quantity (docs/design.md,
    /// "The opening draw").
    pub fn line(&self, units: u32) -> String {
        self.key(&format!("entrants:{units}"))
    }

    /// The draw's lines, of 1 to [`MOST_PER_BUYER`] units in that order.
    pub fn lines(&self) -> Vec<String> {
        (1..=MOST_PER_BUYER).map(|units| self.line(units)).collect()
    }

    /// Hash of the draw's entrants handed a unit who have not pressed since: no request
    /// waits for their outcome, and their next press hears it as their own
    /// (docs/design.md, "The opening draw").
    pub fn drawn(&self) -> String {
        self.key("drawn")
    }

    /// Set for a moment once a press found every bucket of the sale empty: this bucket's
    /// buyers hear `sold_out` without trying the others (`crate::buckets::ALL_OUT_MS`).
    pub fn all_out(&self) -> String {
        self.key("all-out")
    }

    /// Hash of when a press here, or a walk passing here, last saw each bucket of the
    /// sale sold out, by its place: this bucket marks itself all out once it saw every
    /// one so a moment ago (`lua/admission.lua`, KEYS[13]).
    pub fn seen_out(&self) -> String {
        self.key("seen-out")
    }

    /// Hash of the voucher's counters, which the scripts keep as they decide; see
    /// `lua/metrics.lua` and [`super::Figures`].
    pub fn metrics(&self) -> String {
        self.key("metrics")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UserId;
    use crate::order_id::EPOCH;
    use crate::sale::Ticket;

    #[test]
    fn keys_share_the_voucher_hash_tag() {
        let keys = Keys::new(BucketId::from_raw(42));
        assert_eq!(keys.voucher(), "seckill:{42}:voucher");
        assert_eq!(keys.buyers(), "seckill:{42}:buyers");
        assert_eq!(keys.queue(), "seckill:{42}:queue");
        assert_eq!(keys.lease(), "seckill:{42}:lease");
        let entry = Entry {
            user: UserId::from_raw(9),
            ticket: Ticket::new(EPOCH + 1, 7),
        };
        assert_eq!(keys.done(entry), "seckill:{42}:done:9:1704067201:7");
        assert_eq!(keys.sync_lease(), "seckill:{42}:sync");
        // One Redis: one of each for every voucher.
        assert_eq!(keys.highest_voucher(), HIGHEST_VOUCHER);
        assert_eq!(keys.order_sequence(), "seckill:order-seq");
    }

    #[test]
    fn on_a_cluster_the_keys_a_slot_shares_sit_in_that_slot() {
        for id in [1, 42, 7_000_001] {
            let keys = Keys {
                voucher_id: BucketId::from_raw(id),
                on_a_cluster: true,
            };
            for key in [
                keys.voucher(),
                keys.order_sequence() + ":1704067201",
                keys.highest_voucher(),
            ] {
                assert_eq!(key_slot(key.as_bytes()), keys.slot(), "{key}");
            }
        }
    }
}

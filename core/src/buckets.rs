//! A hot voucher's stock over several Redis slots (docs/design.md, "Buckets"): a sale
//! created with `buckets` > 1 is that many voucher rows, each with its share of the stock
//! and its own keys (a slot of their own), the first being the voucher the storefront
//! sells. A buyer is pinned to one bucket by her id and moves on round the ring only when
//! hers is sold out, so a sale's presses spread over the primaries of its buckets.

use std::collections::HashMap;

use crate::ids::{BucketId, SaleId, UserId};
use crate::redis_cluster::{key_slot, SlotMap};

/// Most buckets a sale may have: more spread a sale thinner than any cluster needs, and
/// every bucket is a commit stream of its own into MySQL.
pub const MAX_BUCKETS: u64 = 64;

/// How long a buyer's bucket answers `sold_out` by itself once a press found every bucket
/// empty, at most, milliseconds after the oldest sighting the mark rests on (however it was
/// passed on: `lua/records.lua`): the sold-out flood, and a lone press after a quiet, then
/// cost one script a press. Units given back end it sooner: in their own bucket at once (a
/// return clears the mark), in the others once the request that gave them reopened them
/// (`crate::returns`). This bounds only a mark whose reopening was lost (its request died
/// between the two), or whose units came back some other way (a publication's give-back,
/// an audit's).
pub const ALL_OUT_MS: i64 = 30_000;

/// How long a bucket's sighting of another sold out counts towards marking it all out,
/// milliseconds (`lua/admission/sightings.lua`): a sighting older than that may predate
/// units that came back.
pub const SIGHTING_MS: i64 = 1_000;

/// Where a voucher's stock lives, as MySQL's row says and Redis's hash keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Spread {
    /// All of it in the voucher's own keys: every sale created without buckets.
    #[default]
    Whole,
    /// The first bucket of a sale of several; the other buckets, in order.
    First(Vec<BucketId>),
    /// A later bucket of this sale.
    BucketOf(SaleId),
}

/// The buckets of one sale, its first bucket (the voucher the storefront sells) first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    sale: SaleId,
    all: Vec<BucketId>,
    created: i64,
}

impl Buckets {
    /// The sale with its `others` (of [`Spread::First`]) after its first bucket.
    pub fn new(sale: SaleId, others: &[BucketId]) -> Buckets {
        Buckets {
            sale,
            all: std::iter::once(sale.first_bucket())
                .chain(others.iter().copied())
                .collect(),
            created: 0,
        }
    }

    /// The same buckets, known to be those of the sale created at `created` (unix
    /// seconds): a press routed by them is admitted only by buckets of that creation
    /// (`lua/admission.lua`), as a list kept for the sale's id may be a lost sale's.
    pub fn with_created(self, created: i64) -> Buckets {
        Buckets { created, ..self }
    }

    /// When the sale these are the buckets of was created; 0: not known.
    pub fn created(&self) -> i64 {
        self.created
    }

    pub fn sale(&self) -> SaleId {
        self.sale
    }

    /// Every bucket, the sale's first.
    pub fn all(&self) -> &[BucketId] {
        &self.all
    }

    /// Where `bucket`'s hash says the sale's stock lives, as a load installs it.
    pub fn spread_of(&self, bucket: BucketId) -> Spread {
        match self.all.as_slice() {
            [_] => Spread::Whole,
            [first, others @ ..] if *first == bucket => Spread::First(others.to_vec()),
            [_, ..] => Spread::BucketOf(self.sale),
            [] => unreachable!("a sale has a bucket"),
        }
    }

    /// The buckets in the order `buyer` tries them: hers first, then round the ring. Ids
    /// handed out in order make neighbours of the same bucket's buyers spread evenly.
    pub fn ring(&self, buyer: UserId) -> Vec<BucketId> {
        let home = (buyer.raw() % self.all.len() as u64) as usize;
        self.all[home..]
            .iter()
            .chain(&self.all[..home])
            .copied()
            .collect()
    }
}

impl Spread {
    /// The buckets of `sale`, as far as its first bucket's row (this spread) tells.
    pub fn buckets(&self, sale: SaleId) -> Buckets {
        match self {
            Spread::First(others) => Buckets::new(sale, others),
            Spread::Whole | Spread::BucketOf(_) => Buckets::new(sale, &[]),
        }
    }
}

/// How far past the last bucket's id a placement looks for one on a primary holding the
/// fewest: a primary serving a third of the slots turns up within a few ids.
const PLACEMENT_REACH: u64 = 1024;

/// The ids of a sale of `count` buckets on the Redis Cluster `map`, the first `first` (a
/// bucket's keys live in the slot its id hashes to): each later bucket takes the next id
/// above the last whose primary holds the fewest of the sale's buckets so far, so that
/// the sale's presses spread over the primaries as evenly as the slot map allows. The
/// ids skipped are ids no voucher takes.
pub fn placed(first: SaleId, count: u64, map: &SlotMap) -> Vec<BucketId> {
    let primary = |id: u64| map.owner(key_slot(id.to_string().as_bytes()));
    let mut held: HashMap<&str, u64> = map.primaries().into_iter().map(|p| (p, 0)).collect();
    let hold = |held: &mut HashMap<&str, u64>, id: u64| {
        if let Some(count) = primary(id).and_then(|p| held.get_mut(p)) {
            *count += 1;
        }
    };
    hold(&mut held, first.raw());
    let mut ids = vec![first.first_bucket()];
    let mut next = first.raw() + 1;
    while (ids.len() as u64) < count {
        let fewest = held.values().copied().min().unwrap_or(0);
        let id = (next..next + PLACEMENT_REACH)
            .find(|&id| primary(id).is_some_and(|p| held.get(p) == Some(&fewest)))
            .unwrap_or(next);
        hold(&mut held, id);
        ids.push(BucketId::from_raw(id));
        next = id + 1;
    }
    ids
}

/// Bucket ids as MySQL and the scripts list them, `<id>,<id>...` (`""`: none).
pub fn parse_ids(text: &str) -> Option<Vec<BucketId>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(BucketId::parse).collect()
}

/// Bucket ids as [`parse_ids`] reads them.
pub fn list_ids(ids: &[BucketId]) -> String {
    let ids: Vec<String> = ids.iter().map(BucketId::to_string).collect();
    ids.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_buyer_starts_at_her_bucket_and_tries_every_bucket_once() {
        let ids = |raw: &[u64]| -> Vec<BucketId> {
            raw.iter().map(|id| BucketId::from_raw(*id)).collect()
        };
        let buckets = Buckets::new(SaleId::from_raw(10), &ids(&[11, 12]));
        assert_eq!(buckets.ring(UserId::from_raw(3)), ids(&[10, 11, 12]));
        assert_eq!(buckets.ring(UserId::from_raw(4)), ids(&[11, 12, 10]));
        assert_eq!(buckets.ring(UserId::from_raw(u64::MAX)), ids(&[10, 11, 12]));
        let one = Buckets::new(SaleId::from_raw(7), &[]);
        assert_eq!(one.ring(UserId::from_raw(5)), ids(&[7]));
    }

    #[test]
    fn the_first_bucket_names_the_others_and_each_other_the_first() {
        let sale = SaleId::from_raw(7);
        let [a, b, c] = [7, 8, 9].map(BucketId::from_raw);
        let buckets = Buckets::new(sale, &[b, c]);
        assert_eq!(buckets.spread_of(a), Spread::First(vec![b, c]));
        assert_eq!(buckets.spread_of(c), Spread::BucketOf(sale));
        assert_eq!(Buckets::new(sale, &[]).spread_of(a), Spread::Whole);
    }

    #[test]
    fn a_sale_s_buckets_spread_evenly_over_the_primaries_from_its_first_id() {
        let map = SlotMap::parse(
            "a 10.0.0.1:6379@1 master - 0 0 1 connected 0-5460\n\
             b 10.0.0.2:6379@1 master - 0 0 2 connected 5461-10922\n\
             c 10.0.0.3:6379@1 master - 0 0 3 connected 10923-16383",
        )
        .unwrap();
        for (first, count) in [(1, 9), (1000, 9), (77_777, 12), (5, 4), (42, 1)] {
            let ids = placed(SaleId::from_raw(first), count, &map);
            assert_eq!(ids.len() as u64, count);
            assert_eq!(ids[0].raw(), first);
            assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
            let mut held: HashMap<&str, u64> = HashMap::new();
            for id in &ids {
                *held
                    .entry(map.owner(key_slot(id.to_string().as_bytes())).unwrap())
                    .or_default() += 1;
            }
            let (most, least) = (held.values().max(), held.values().min());
            let spread = count.min(3);
            assert_eq!(held.len() as u64, spread, "{first}: {held:?}");
            assert!(most.unwrap() - least.unwrap() <= 1, "{first}: {held:?}");
        }
    }

    #[test]
    fn id_lists_read_back() {
        let ids: Vec<BucketId> = [8, 19].map(BucketId::from_raw).to_vec();
        assert_eq!(list_ids(&ids), "8,19");
        assert_eq!(parse_ids("8,19"), Some(ids));
        assert_eq!(parse_ids(""), Some(vec![]));
        for bad in ["8,", ",8", "8;9", "08"] {
            assert_eq!(parse_ids(bad), None, "{bad}");
        }
    }
}

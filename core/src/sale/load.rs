//! `lua/load.lua`: installing a voucher's sale in Redis: at its creation, by an admin's
//! sync (the sync lease [`BeginSync`], pages of MySQL's buyers [`super::Stage`], then the
//! terms [`Load`]), and
//! by the first press of a sale that ended so long ago that Redis let it expire.

use crate::buckets::{list_ids, Spread};
use crate::ids::{BucketId, VoucherId};
use crate::ledger::Ledger;
use crate::redis::{args, Arg, Command, Reply, UnexpectedReply, LOAD};

use super::{parse_any, parse_set_nx, set_nx, Call, Keys, Terms, KEPT_AFTER_END_MS, SYNC_LEASE_MS};

/// Starts a sync: takes the voucher's sync lease for `token` (a `SET ... NX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginSync<'a> {
    pub voucher_id: BucketId,
    pub token: &'a str,
}

impl Call for BeginSync<'_> {
    /// Whether the lease is this sync's (else another sync holds it).
    type Output = bool;

    fn command(&self) -> Command {
        set_nx(
            Keys::new(self.voucher_id).sync_lease(),
            self.token,
            SYNC_LEASE_MS,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_set_nx(reply)
    }
}

/// Who installs the terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installer<'a> {
    /// The creation of the voucher: no buyers, no lease involved.
    Creation,
    /// The end of the sync holding this lease token.
    Sync(&'a str),
    /// A press of a sale Redis let expire: installed only if the sale has ended by
    /// Redis's clock, so that nothing can be sold from terms loaded without buyers.
    Restoration,
}

/// Installs the terms; see `lua/load.lua`. Buyers and the queue stay as they are.
/// `highest` is the highest voucher id MySQL had handed out when the terms were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load<'a> {
    pub voucher_id: BucketId,
    pub installer: Installer<'a>,
    pub terms: &'a Terms,
    /// The highest voucher id MySQL handed out: any row's, so a [`VoucherId`].
    pub highest: VoucherId,
    /// When MySQL created the sale, unix seconds (0: unknown, a sale created before
    /// creations were stamped): a sync never installs another sale's terms over these.
    pub created: i64,
    /// What `terms.stock` counts.
    pub ledger: Ledger,
    /// Where the sale's stock lives.
    pub spread: &'a Spread,
    /// The version of the terms (`lua/change.lua`): a sync never installs older terms.
    pub terms_version: u64,
}

impl Call for Load<'_> {
    /// Whether the terms were installed (else the sync lost its lease, or a restored
    /// sale had not ended).
    type Output = bool;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let (token, only_if_ended) = match self.installer {
            Installer::Creation => ("", 0),
            Installer::Sync(token) => (token, 0),
            Installer::Restoration => ("", 1),
        };
        let terms = self.terms;
        Command::script(
            &LOAD,
            vec![
                keys.voucher(),
                keys.sync_lease(),
                keys.absent(),
                keys.buyers(),
                keys.metrics(),
                keys.highest_voucher(),
            ],
            args![
                stock = terms.stock as i64,
                begin_ms = terms.begin_ms,
                end_ms = terms.end_ms,
                initial_stock = terms.initial_stock as i64,
                title = terms.title.as_str(),
                description = terms.description.as_str(),
                token = token,
                keep_ms = KEPT_AFTER_END_MS,
                highest = self.highest.to_string(),
                only_if_ended = only_if_ended,
                pay_within_s = terms.pay_within_s as i64,
                returned_event = self.ledger.returned_event.to_string(),
                orders = self.ledger.orders.to_string(),
                spread = match self.spread {
                    Spread::Whole => String::new(),
                    Spread::First(others) => format!("buckets:{}", list_ids(others)),
                    Spread::BucketOf(sale) => format!("sale:{sale}"),
                },
                draw_ms = terms.draw_ms as i64,
                per_buyer = terms.per_buyer as i64,
                created = self.created,
                announce_ms = terms.announce_ms,
                terms_version = self.terms_version as i64,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(1)] => Ok(true),
            // 2: a live sale lost, which the client lists as stale (`listings`).
            [Reply::Int(0 | 2)] => Ok(false),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// When the sale of `voucher_id` was created, as its install stamped it (`created`, unix
/// seconds; 0 when it holds none): what a list of the sale's buckets kept by a host is
/// checked against (`crate::buckets::Buckets::with_created`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Created {
    pub voucher_id: BucketId,
}

impl Call for Created {
    type Output = i64;

    fn command(&self) -> Command {
        Command::plain(
            "HGET",
            vec![
                Keys::new(self.voucher_id).voucher().into(),
                "created".into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<i64, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Nil] => Ok(0),
            [Reply::Bytes(text)] => std::str::from_utf8(text)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or(UnexpectedReply(reply)),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Deletes the keys a failed creation leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forget {
    pub voucher_id: BucketId,
}

impl Call for Forget {
    type Output = ();

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::plain(
            "DEL",
            [
                keys.voucher(),
                keys.buyers(),
                keys.queue(),
                keys.lease(),
                keys.metrics(),
            ]
            .into_iter()
            .map(Arg::from)
            .collect(),
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}

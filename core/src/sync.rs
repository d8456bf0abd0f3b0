//! `POST /vouchers/{id}/sync`, as a state machine that does no I/O of its own (as
//! [`crate::purchase`] is): it rebuilds a voucher's Redis sale state from MySQL after
//! Redis lost data. One sync of a voucher runs at a time (its sync lease); MySQL's buyers
//! are merged page by page, and the terms installed at the end, only while the sync still
//! holds the lease. The component runs it on Spin; the schedule explorer runs the same
//! steps with faults between them.

use crate::buckets::Spread;
use crate::error::{ApiError, BackendError, Unavailable};
use crate::ids::{BucketId, UserId};
use crate::lookup::Held;
use crate::order_id::OrderId;
use crate::purchase::Lookup;
use crate::redis::{Command, Reply};
use crate::sale::{parsed, BeginSync, Call, Installer, Load, Record, Stage, Terms};

/// Buyers read from MySQL per round trip.
pub const PAGE: u32 = 1000;

/// What the sync needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// The voucher's terms and the highest voucher id, from MySQL; resume with
    /// [`Input::Voucher`].
    ReadVoucher,
    /// `sql::BUYERS_PAGE` of the voucher; resume with [`Input::Page`].
    BuyersPage { after: OrderId, limit: u32 },
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// The admin's answer: the terms installed.
    Answer(Result<Terms, ApiError>),
}

/// The result of what the sync asked for; a failure is its cause, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Voucher(Result<Lookup, BackendError>),
    Page(Result<Vec<(UserId, Record)>, BackendError>),
    Redis(Result<Vec<Reply>, BackendError>),
}

/// Where the sync is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    ReadingVoucher,
    /// Taking the sync lease.
    Beginning,
    /// Reading the page of buyers after this order id.
    Reading(OrderId),
    /// Merging a page into Redis; `last` when it was a short page.
    Staging {
        page: Vec<(UserId, Record)>,
        last: bool,
    },
    /// Installing the terms.
    Loading,
    Done,
}

/// One admin's sync of one voucher.
#[derive(Debug, Clone)]
pub struct VoucherSync {
    voucher_id: BucketId,
    token: String,
    page: u32,
    /// The sale read from MySQL: its pages and terms go to no other sale of the id (its
    /// `created`).
    sale: Option<Held>,
    phase: Phase,
    causes: Vec<String>,
}

impl VoucherSync {
    /// A sync under the lease token `token` (unique to it), and what it needs first.
    pub fn start(voucher_id: BucketId, token: String) -> (VoucherSync, Io) {
        VoucherSync::with_page(voucher_id, token, PAGE)
    }

    /// [`VoucherSync::start`] with pages of `page` buyers: a test's small pages make a sync of
    /// a few buyers take several steps.
    pub fn with_page(voucher_id: BucketId, token: String, page: u32) -> (VoucherSync, Io) {
        let sync = VoucherSync {
            voucher_id,
            token,
            page,
            sale: None,
            phase: Phase::ReadingVoucher,
            causes: Vec::new(),
        };
        (sync, Io::ReadVoucher)
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The terms read from MySQL, once read.
    pub fn terms(&self) -> Option<&Terms> {
        self.sale.as_ref().map(|sale| &sale.terms)
    }

    /// Where the sale's stock lives, once MySQL was read: a sale of several buckets is
    /// synced a bucket at a time.
    pub fn spread(&self) -> &Spread {
        static WHOLE: Spread = Spread::Whole;
        self.sale.as_ref().map_or(&WHOLE, |sale| &sale.spread)
    }

    /// What went wrong on the way, for the request log.
    pub fn causes(&self) -> &[String] {
        &self.causes
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next.
    pub fn resume(&mut self, input: Input) -> Io {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, input) {
            (Phase::ReadingVoucher, Input::Voucher(lookup)) => {
                match lookup.map(|lookup| Held::read(self.voucher_id, lookup)) {
                    Ok(Some(mut sale)) => {
                        sale.highest = sale.highest.max(self.voucher_id.into());
                        self.sale = Some(sale);
                        self.phase = Phase::Beginning;
                        Io::Redis(self.begin().command())
                    }
                    Ok(None) => self.answer(Err(ApiError::NotFound)),
                    Err(cause) => self.failed(cause),
                }
            }
            (Phase::Beginning, Input::Redis(reply)) => match parsed::<BeginSync>(reply) {
                Ok(true) => self.read_page(OrderId::from_raw(0)),
                Ok(false) => self.answer(Err(ApiError::SyncInProgress)),
                Err(cause) => self.failed(cause),
            },
            (Phase::Reading(_), Input::Page(page)) => match page {
                Ok(page) => {
                    let last = page.len() < self.page as usize;
                    let command = self.stage(&page).command();
                    self.phase = Phase::Staging { page, last };
                    Io::Redis(command)
                }
                Err(cause) => self.failed(cause),
            },
            (Phase::Staging { page, last }, Input::Redis(reply)) => match parsed::<Stage>(reply) {
                Ok(true) => match page.last().and_then(|(_, record)| record.order_id()) {
                    Some(after) if !last => self.read_page(after),
                    _ => {
                        self.phase = Phase::Loading;
                        Io::Redis(self.load().command())
                    }
                },
                Ok(false) => self.lost(),
                Err(cause) => self.failed(cause),
            },
            (Phase::Loading, Input::Redis(reply)) => match parsed::<Load>(reply) {
                Ok(true) => {
                    let terms = self.read().terms.clone();
                    self.answer(Ok(terms))
                }
                Ok(false) => self.lost(),
                Err(cause) => self.failed(cause),
            },
            (phase, input) => panic!("a sync {phase:?} was resumed with {input:?}"),
        }
    }

    fn begin(&self) -> BeginSync<'_> {
        BeginSync {
            voucher_id: self.voucher_id,
            token: &self.token,
        }
    }

    fn stage<'a>(&'a self, page: &'a [(UserId, Record)]) -> Stage<'a> {
        Stage {
            voucher_id: self.voucher_id,
            token: &self.token,
            created: self.read().created,
            buyers: page,
        }
    }

    fn load(&self) -> Load<'_> {
        self.read()
            .load(self.voucher_id, Installer::Sync(&self.token))
    }

    /// The sale read from MySQL, which every phase after the first has.
    fn read(&self) -> &Held {
        self.sale.as_ref().expect("read first")
    }

    fn read_page(&mut self, after: OrderId) -> Io {
        self.phase = Phase::Reading(after);
        Io::BuyersPage {
            after,
            limit: self.page,
        }
    }

    /// The lease is no longer this sync's (another sync took over, or Redis restarted and
    /// lost the pages merged so far): nothing more is written.
    fn lost(&mut self) -> Io {
        self.answer(Err(ApiError::Unavailable(Unavailable::SyncInterrupted)))
    }

    fn failed(&mut self, cause: BackendError) -> Io {
        let backend = cause.unavailable();
        self.causes.push(cause.to_string());
        self.answer(Err(ApiError::Unavailable(backend)))
    }

    fn answer(&mut self, answer: Result<Terms, ApiError>) -> Io {
        self.phase = Phase::Done;
        Io::Answer(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::VoucherId;
    use crate::ledger::Ledger;

    const VOUCHER: BucketId = BucketId::from_raw(4);

    fn terms() -> Terms {
        Terms::sample(1, 3, 0, 1_000)
    }

    fn found() -> Input {
        Input::Voucher(Ok(Lookup {
            terms: Some(terms()),
            highest: Some(VoucherId::from_raw(9)),
            ledger: Ledger::default(),
            spread: Spread::Whole,
            created: 0,
            unlisted: false,
            terms_version: 0,
        }))
    }

    fn script(io: &Io) -> &'static str {
        match io {
            Io::Redis(Command::Script { script, .. }) => script.name,
            Io::Redis(Command::Plain { name, .. }) => name,
            other => panic!("not Redis: {other:?}"),
        }
    }

    fn page(ids: &[u64]) -> Input {
        Input::Page(Ok(ids
            .iter()
            .map(|id| {
                (
                    UserId::from_raw(*id),
                    Record::Ordered(OrderId::from_raw(*id), 1),
                )
            })
            .collect()))
    }

    #[test]
    fn a_sync_stages_page_after_page_then_loads() {
        let (mut sync, io) = VoucherSync::with_page(VOUCHER, "t".into(), 2);
        assert_eq!(io, Io::ReadVoucher);
        assert_eq!(script(&sync.resume(found())), "SET");
        let io = sync.resume(Input::Redis(Ok(vec![Reply::Status("OK".into())])));
        assert_eq!(
            io,
            Io::BuyersPage {
                after: OrderId::from_raw(0),
                limit: 2
            }
        );
        assert_eq!(script(&sync.resume(page(&[1, 2]))), "stage");
        let io = sync.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(
            io,
            Io::BuyersPage {
                after: OrderId::from_raw(2),
                limit: 2
            }
        );
        assert_eq!(script(&sync.resume(page(&[3]))), "stage");
        assert_eq!(
            script(&sync.resume(Input::Redis(Ok(vec![Reply::Int(1)])))),
            "load"
        );
        assert_eq!(
            sync.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Answer(Ok(terms()))
        );
    }

    #[test]
    fn a_sync_stops_where_it_cannot_go_on() {
        let (mut sync, _) = VoucherSync::start(VOUCHER, "t".into());
        let io = sync.resume(Input::Voucher(Ok(Lookup {
            terms: None,
            highest: None,
            ledger: Ledger::default(),
            spread: Spread::Whole,
            created: 0,
            unlisted: false,
            terms_version: 0,
        })));
        assert_eq!(io, Io::Answer(Err(ApiError::NotFound)));

        let (mut sync, _) = VoucherSync::start(VOUCHER, "t".into());
        sync.resume(found());
        assert_eq!(
            sync.resume(Input::Redis(Ok(vec![Reply::Nil]))),
            Io::Answer(Err(ApiError::SyncInProgress))
        );

        let (mut sync, _) = VoucherSync::start(VOUCHER, "t".into());
        sync.resume(found());
        sync.resume(Input::Redis(Ok(vec![Reply::Status("OK".into())])));
        sync.resume(page(&[]));
        assert_eq!(
            sync.resume(Input::Redis(Ok(vec![Reply::Int(0)]))),
            Io::Answer(Err(ApiError::Unavailable(Unavailable::SyncInterrupted)))
        );
    }
}

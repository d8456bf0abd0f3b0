//! The one driver of the state machines (a purchase, a give-back, a sync): it does what
//! each asks for through [`Backend`], the port all their I/O goes through, and resumes it
//! with the result. The component runs them on Spin's Redis and MySQL (both builds), the
//! tests and the schedule explorer on clients of their own: the same steps either way,
//! so what the tests run is what ships.

use crate::error::{ApiError, BackendError};
use crate::ids::{BucketId, UserId};
use crate::ledger::Returned;
use crate::lookup::{self, Found, VoucherLookup};
use crate::order_id::OrderId;
use crate::purchase::{self, Lookup, Purchase};
use crate::redis::{Command, Reply};
use crate::returns::{self, Returns};
use crate::sale::{Record, Terms};
use crate::sync::{self, VoucherSync};
use crate::verdict::{Committed, Committing};

/// Where the state machines' I/O goes: Redis commands and scripts, and MySQL's
/// statements, each answered with its result or why it failed ([`BackendError`]).
/// An implementation opens its connections when first asked; after a failed commit, it
/// commits the next batch on a fresh MySQL connection (a batch written twice is committed
/// once, so the retry is safe).
// Only this crate's drivers call it, and with concrete types: no `Send` bound is needed.
#[allow(async_fn_in_trait)]
pub trait Backend {
    async fn redis(&mut self, command: &Command) -> Result<Vec<Reply>, BackendError>;
    /// `sql::COMMIT_BATCH` of these `(order id, buyer, units)` purchases of the voucher.
    async fn commit(
        &mut self,
        voucher_id: BucketId,
        batch: &[Committing],
    ) -> Result<Committed, BackendError>;
    /// The voucher's terms in MySQL, and the highest voucher id.
    async fn lookup(&mut self, voucher_id: BucketId) -> Result<Lookup, BackendError>;
    /// `sql::EXPIRE_DUE`: orders expired, and the earliest deadline left.
    async fn expire_due(
        &mut self,
        voucher_id: BucketId,
        limit: u32,
    ) -> Result<(usize, Option<i64>), BackendError>;
    /// `sql::RETURNS_AFTER`.
    async fn returns_after(
        &mut self,
        voucher_id: BucketId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Returned>, BackendError>;
    /// `sql::BUYERS_PAGE`, as Redis records them.
    async fn buyers_page(
        &mut self,
        voucher_id: BucketId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<(UserId, Record)>, BackendError>;
}

/// Does one step of a purchase at its bucket `voucher_id` ([`Purchase::bucket`]).
pub async fn purchase_step(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    io: purchase::Io,
) -> purchase::Input {
    match io {
        purchase::Io::Redis(command) => purchase::Input::Redis(backend.redis(&command).await),
        purchase::Io::Commit(batch) => {
            purchase::Input::Committed(backend.commit(voucher_id, &batch).await)
        }
        purchase::Io::ReadVoucher => purchase::Input::Voucher(backend.lookup(voucher_id).await),
        purchase::Io::Sweep(step) => {
            purchase::Input::Sweep(returns_step(backend, voucher_id, step).await)
        }
        purchase::Io::Answer(_) => unreachable!("an answer is not performed"),
    }
}

/// Does one step of a lookup of `voucher_id`.
pub async fn lookup_step(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    io: lookup::Io,
) -> lookup::Input {
    match io {
        lookup::Io::Redis(command) => lookup::Input::Redis(backend.redis(&command).await),
        lookup::Io::ReadVoucher => lookup::Input::Voucher(backend.lookup(voucher_id).await),
        lookup::Io::Found(_) => unreachable!("a lookup that found asks for nothing"),
    }
}

/// Runs a lookup of `voucher_id` to what it found.
pub async fn look_up(backend: &mut impl Backend, voucher_id: BucketId) -> (Found, VoucherLookup) {
    let (mut lookup, mut io) = VoucherLookup::start(voucher_id);
    loop {
        match io {
            lookup::Io::Found(found) => return (found, lookup),
            step => {
                let input = lookup_step(backend, voucher_id, step).await;
                io = lookup.resume(input);
            }
        }
    }
}

/// Does one step of a give-back (a sweep or a restock) of `voucher_id`.
pub async fn returns_step(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    io: returns::Io,
) -> returns::Input {
    match io {
        returns::Io::ExpireDue { limit } => {
            returns::Input::Expired(backend.expire_due(voucher_id, limit).await)
        }
        returns::Io::ReturnsAfter { after, limit } => {
            returns::Input::Returns(backend.returns_after(voucher_id, after, limit).await)
        }
        returns::Io::Commit(batch) => {
            returns::Input::Committed(backend.commit(voucher_id, &batch).await)
        }
        returns::Io::Redis(command) => returns::Input::Redis(backend.redis(&command).await),
        returns::Io::Done(_) => unreachable!("a run that is over asks for nothing"),
    }
}

/// Does one step of a sync of `voucher_id`.
pub async fn sync_step(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    io: sync::Io,
) -> sync::Input {
    match io {
        sync::Io::ReadVoucher => sync::Input::Voucher(backend.lookup(voucher_id).await),
        sync::Io::BuyersPage { after, limit } => {
            sync::Input::Page(backend.buyers_page(voucher_id, after, limit).await)
        }
        sync::Io::Redis(command) => sync::Input::Redis(backend.redis(&command).await),
        sync::Io::Answer(_) => unreachable!("an answer is not performed"),
    }
}

/// Runs a purchase from `io` until its answer, or until `stop` says so (the component
/// stops once the buyer's receipt is known, answers, and runs the rest after); returns
/// what it would do next.
pub async fn purchase_until(
    backend: &mut impl Backend,
    purchase: &mut Purchase,
    mut io: purchase::Io,
    stop: impl Fn(&Purchase) -> bool,
) -> purchase::Io {
    while !matches!(io, purchase::Io::Answer(_)) && !stop(purchase) {
        let input = purchase_step(backend, purchase.bucket(), io).await;
        io = purchase.resume(input);
    }
    io
}

/// Runs a give-back of `voucher_id` to its end: the units given back, or why it stopped.
pub async fn give_back(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    run: &mut Returns,
    mut io: returns::Io,
) -> Result<u64, BackendError> {
    loop {
        match io {
            returns::Io::Done(given) => return given,
            step => {
                let input = returns_step(backend, voucher_id, step).await;
                io = run.resume(input);
            }
        }
    }
}

/// Runs a sync of `voucher_id` to its answer.
pub async fn sync(
    backend: &mut impl Backend,
    voucher_id: BucketId,
    run: &mut VoucherSync,
    mut io: sync::Io,
) -> Result<Terms, ApiError> {
    loop {
        match io {
            sync::Io::Answer(answer) => return answer,
            step => {
                let input = sync_step(backend, voucher_id, step).await;
                io = run.resume(input);
            }
        }
    }
}

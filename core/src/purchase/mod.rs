//! One purchase request, `POST /vouchers/{id}/orders`, as a state machine that does no I/O
//! of its own: it says what it needs done next ([`Io`]) and is resumed with the result
//! ([`Input`]) until it gives the buyer's answer. The component runs it on Spin's Redis
//! and MySQL; the schedule explorer runs many at once, step by step, on real servers,
//! with faults in between. Both run these very decisions.
//!
//! Redis admission decides in one round trip: a buyer admitted holds a unit and her
//! purchase is queued. She hears `201` once MySQL has committed it, in a group commit:
//! admitted purchases wait in the voucher's queue, and one request at a time (the holder
//! of the voucher's lease, which lapses by itself) writes them to MySQL in batches of one
//! transaction each, then publishes each buyer's outcome. The other admitted requests
//! wait for their own outcome with a blocking pop, and take the lease over when its
//! holder died or stalled. There is no background process in Spin: draining rides on
//! the purchase requests themselves.
//!
//! Each order is committed once: a batch written again (after a lost reply, or by two
//! drainers after a lease lapsed) finds its orders in MySQL and changes nothing, and only
//! the batch at the head of the queue can be published.
//!
//! It draws nothing itself either: the one random thing a press has, its place in an
//! opening draw, is drawn by its caller ([`DrawPlace`]).
//!
//! Here: the states and how each input moves them. The drain (the group commit as its
//! leaseholder runs it) is `drain.rs`; a press's walk round a sale's buckets, `walk.rs`.

use serde::Serialize;

use crate::buckets::Buckets;
use crate::error::{ApiError, BackendError, Unavailable};
use crate::ids::{BucketId, SaleId, UserId};
use crate::lookup::{self, Found, VoucherLookup};
use crate::order_id::{LayoutError, OrderId};
use crate::redis::{Command, Reply};
use crate::returns::{self, Returns};
use crate::sale::{
    Admission, Admit, AwaitSweep, Call, Claim, Claimed, Count, Counted, Decision, Entry, Limits,
    LineAsk, LineFigures, MarkAllOut, Marked, News, Pointer, Route, Wait, WalkEnd, WalkEnded,
};
pub use crate::sql::Lookup;
use crate::verdict::{Committed, Committing, Verdict};

mod drain;
mod walk;

use drain::{verdict_of, Drain};
use walk::Walk;

/// Empty waits (each a [`crate::sale::WAIT_SLICE`] `BLPOP` and a claim that found someone
/// draining) before a queued purchase's request answers `busy`: about 10 s. The purchase
/// stays queued, and the buyer's next press hears its outcome.
pub const MAX_EMPTY_WAITS: u32 = 20;
/// Tries of one batch's commit: a batch written twice is committed once, so the second
/// try, on a fresh connection, is safe.
pub const COMMIT_TRIES: u32 = 2;
/// Waits (each a [`crate::sale::SWEEP_SLICE`] `BLMOVE` and a press again) for the end of a
/// sweep another request runs, before a press answers as admission said: about 2 s.
pub const MAX_SWEEP_WAITS: u32 = 8;

/// The body of a `201`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub order_id: OrderId,
    pub voucher_id: SaleId,
    pub user_id: UserId,
    /// The order's units.
    pub quantity: u32,
}

/// What the purchase needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// `seckill_commit_batch` of these `(order id, buyer, units)` purchases of the voucher;
    /// resume with [`Input::Committed`]. A commit tried again after a failure wants a
    /// fresh connection.
    Commit(Vec<Committing>),
    /// The voucher's terms in MySQL, if it has one, and the highest voucher id it has
    /// handed out; resume with [`Input::Voucher`].
    ReadVoucher,
    /// A step of the sweep of the voucher's expired orders (admission handed this request
    /// the voucher's sweep lease, [`crate::returns`]); resume with [`Input::Sweep`].
    Sweep(returns::Io),
    /// The buyer's answer: the purchase is over.
    Answer(Result<Receipt, ApiError>),
}

/// The result of what the purchase asked for; a failure is its cause, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Redis(Result<Vec<Reply>, BackendError>),
    Committed(Result<Committed, BackendError>),
    Voucher(Result<Lookup, BackendError>),
    Sweep(returns::Input),
}

#[derive(Debug, Clone)]
enum State {
    Admitting,
    Sweeping(Admission, Returns),
    Committing(Drain),
    Publishing(Drain),
    Waiting,
    Claiming,
    /// Waiting for the end of the sweep another request runs, to press again.
    AwaitingSweep,
    /// Redis holds no sale for the voucher: MySQL is asked.
    LookingUp(VoucherLookup),
    Unlocking(ApiError),
    /// A walk found the buyer's record in another bucket: pointing her home bucket at it
    /// before going on with what that bucket decided.
    Pointing(Admission),
    /// A walk found nothing for her in any bucket: telling her home bucket so (which
    /// marks it all out while it is sold out) before answering.
    EndingWalk(ApiError),
    /// The walk found every bucket empty and her home marked: marking the others it
    /// found empty before answering.
    MarkingOthers {
        answer: ApiError,
        rest: Vec<BucketId>,
    },
    Counting(Result<Receipt, ApiError>),
    Done(Result<Receipt, ApiError>),
}

/// One buyer's press.
#[derive(Debug, Clone)]
pub struct Purchase {
    /// The voucher pressed for: the sale.
    sale: SaleId,
    /// The bucket of the sale this press is at (the sale itself but in a sale of several
    /// buckets: docs/design.md, "Buckets").
    bucket: BucketId,
    /// The buckets still to try once this one is sold out, in order.
    ring: Vec<BucketId>,
    /// The buyer's own bucket of the sale, once its buckets are known.
    home: Option<BucketId>,
    /// What this press's walk round the buckets met so far.
    walk: Walk,
    /// The sale's buckets, once known: the buyer's is the first this press tried.
    buckets: Option<Buckets>,
    buyer: UserId,
    /// The units she asks for.
    units: u32,
    /// Her place if this press enters an opening draw.
    draw_place: DrawPlace,
    /// What she asks of the sale's line.
    line: LineAsk,
    /// The sale's line as admission last told it.
    line_figures: LineFigures,
    limits: Limits,
    state: State,
    decision: Option<Decision>,
    empty_waits: u32,
    /// The sale's stock after this press's last step that read it (its sweep's restock,
    /// a publication of its drain), since its last admission.
    stock: Option<i64>,
    /// The last admission found another request sweeping the sale's expiries.
    sweeping: bool,
    /// Whether it pressed again for units its own steps left in Redis (once).
    pressed_again: bool,
    /// Ends of another request's sweep waited for so far (at most [`MAX_SWEEP_WAITS`]).
    sweep_waits: u32,
    causes: Vec<String>,
}

/// A buyer's place if her press enters an opening draw: random, so that neither speed nor
/// pressing again wins a draw (docs/design.md, "The opening draw"), and below 2^48, as
/// admission keeps it. The caller draws it for each press.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawPlace(u64);

impl DrawPlace {
    /// The place of 128 random bits (a v4 UUID's, say): their top 48.
    pub const fn from_random(bits: u128) -> DrawPlace {
        DrawPlace((bits >> 80) as u64)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

impl Purchase {
    /// A press of `buyer` for `units` of `voucher_id`, at `place` if it enters a draw, and
    /// what it needs first: admission.
    pub fn start(sale: SaleId, buyer: UserId, units: u32, place: DrawPlace) -> (Purchase, Io) {
        Purchase::with_limits(sale, buyer, units, Limits::SHIPPED, place)
    }

    /// [`Purchase::start`] with other batch and queue limits: a test's small batches make
    /// a drain of a few buyers span several.
    pub fn with_limits(
        sale: SaleId,
        buyer: UserId,
        units: u32,
        limits: Limits,
        place: DrawPlace,
    ) -> (Purchase, Io) {
        let purchase = Purchase {
            sale,
            bucket: sale.first_bucket(),
            ring: Vec::new(),
            home: None,
            walk: Walk::default(),
            buckets: None,
            buyer,
            units,
            draw_place: place,
            line: LineAsk::Press,
            line_figures: LineFigures::default(),
            limits,
            state: State::Admitting,
            decision: None,
            empty_waits: 0,
            stock: None,
            sweeping: false,
            pressed_again: false,
            sweep_waits: 0,
            causes: Vec::new(),
        };
        let admit = purchase.admit();
        (purchase, Io::Redis(admit.command()))
    }

    /// What `buyer` asks of the sale's line (docs/design.md, "The line"), for `units` (a
    /// join's) at `place` if her join draws one: it runs as a press, admission deciding
    /// by `line`.
    pub fn in_line(
        sale: SaleId,
        buyer: UserId,
        units: u32,
        place: DrawPlace,
        line: LineAsk,
    ) -> (Purchase, Io) {
        Purchase::in_line_with_limits(sale, buyer, units, Limits::SHIPPED, place, line)
    }

    /// [`Purchase::in_line`] with other batch and queue limits, as
    /// [`Purchase::with_limits`] for a press.
    pub fn in_line_with_limits(
        sale: SaleId,
        buyer: UserId,
        units: u32,
        limits: Limits,
        place: DrawPlace,
        line: LineAsk,
    ) -> (Purchase, Io) {
        let (mut purchase, _) = Purchase::with_limits(sale, buyer, units, limits, place);
        purchase.line = line;
        let io = Io::Redis(purchase.admit().command());
        (purchase, io)
    }

    /// [`Purchase::with_limits`] of a sale whose buckets the caller knows: the press goes
    /// straight to the buyer's.
    pub fn knowing(
        buckets: Buckets,
        buyer: UserId,
        units: u32,
        limits: Limits,
        place: DrawPlace,
    ) -> (Purchase, Io) {
        let (mut purchase, _) = Purchase::with_limits(buckets.sale(), buyer, units, limits, place);
        let io = purchase.route(buckets);
        (purchase, io)
    }

    /// The bucket this press is at now: its commits and reads are that voucher's.
    pub fn bucket(&self) -> BucketId {
        self.bucket
    }

    /// The sale's buckets, when this press learnt or was told them (a caller keeps them
    /// for the sale's next presses).
    pub fn buckets(&self) -> Option<&Buckets> {
        self.buckets.as_ref()
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next: each state
    /// and the input it waits for go to the step below that reads it.
    pub fn resume(&mut self, input: Input) -> Io {
        let state = std::mem::replace(&mut self.state, State::Admitting);
        match (state, input) {
            (State::Admitting, Input::Redis(reply)) => match self.read::<Admit>(reply) {
                Ok(admission) => self.after_admission(admission),
                Err(error) => self.finish(Err(error)),
            },
            (State::Pointing(admission), Input::Redis(reply)) => {
                self.note(&reply, "pointing her bucket at her purchase");
                self.decided(admission)
            }
            (State::Sweeping(admission, sweep), Input::Sweep(input)) => {
                self.sweeping(admission, sweep, input)
            }
            (State::AwaitingSweep, Input::Redis(reply)) => {
                self.note(&reply, "waiting for another request's sweep");
                self.state = State::Admitting;
                Io::Redis(self.admit().command())
            }
            (State::Committing(drain), Input::Committed(result)) => self.committed(drain, result),
            (State::Publishing(drain), Input::Redis(reply)) => self.published(drain, reply),
            (State::Waiting, Input::Redis(reply)) => match self.read::<Wait>(reply) {
                Ok(Some(news)) => self.news(news),
                Ok(None) => {
                    self.state = State::Claiming;
                    Io::Redis(self.claim_call().command())
                }
                Err(error) => self.finish(Err(error)),
            },
            (State::Claiming, Input::Redis(reply)) => match self.read::<Claim>(reply) {
                Ok(claimed) => self.claimed(claimed),
                Err(error) => self.finish(Err(error)),
            },
            (State::LookingUp(lookup), input) => {
                let input = match input {
                    Input::Redis(reply) => lookup::Input::Redis(reply),
                    Input::Voucher(voucher) => lookup::Input::Voucher(voucher),
                    other => panic!("a lookup given {other:?}"),
                };
                self.looked_up(lookup, input)
            }
            (State::EndingWalk(answer), Input::Redis(reply)) => match reply.map(WalkEnd::parse) {
                Ok(Ok(ended)) => self.walk_ended(answer, ended),
                Ok(Err(unexpected)) => {
                    self.causes
                        .push(format!("ending the walk round the buckets: {unexpected}"));
                    self.finish(Err(answer))
                }
                Err(cause) => {
                    self.causes
                        .push(format!("ending the walk round the buckets: {cause}"));
                    self.finish(Err(answer))
                }
            },
            // Every walk marks the buckets in the same order: one marked already is
            // another walk's, which marks the rest. A mark missed only costs that bucket's
            // crowd a walk: no cause, no 503.
            (State::MarkingOthers { answer, rest }, Input::Redis(reply)) => {
                match reply.map(MarkAllOut::parse) {
                    Ok(Ok(Marked::Before)) => self.finish(Err(answer)),
                    _ => self.mark_others(answer, rest),
                }
            }
            (State::Unlocking(error), Input::Redis(reply)) => {
                self.note(&reply, "unlocking the queue");
                self.finish(Err(error))
            }
            (State::Counting(answer), Input::Redis(reply)) => {
                if let (Err(cause), Err(error)) = (reply, &answer) {
                    self.causes
                        .push(format!("counting {}: {cause}", error.code()));
                }
                self.done(answer)
            }
            (State::Done(answer), _) => self.done(answer),
            (state, input) => panic!("a purchase {state:?} was resumed with {input:?}"),
        }
    }

    /// A call whose failure the purchase outlives: noted, for the request log.
    fn note(&mut self, reply: &Result<Vec<Reply>, BackendError>, doing: &str) {
        if let Err(cause) = reply {
            self.causes.push(format!("{doing}: {cause}"));
        }
    }

    /// Admission's decision: the sale's buckets to route by, or her bucket pointed at her
    /// purchase first where a walk found it, or the decision itself.
    fn after_admission(&mut self, admission: Admission) -> Io {
        if admission.decision == Decision::Buckets {
            return self.route(Buckets::new(self.sale, &admission.others));
        }
        match self.pointer_at_home(&admission) {
            Some(command) => {
                self.state = State::Pointing(admission);
                Io::Redis(command)
            }
            None => self.decided(admission),
        }
    }

    /// The sweep admission handed this press, one step on.
    fn sweeping(&mut self, admission: Admission, mut sweep: Returns, input: returns::Input) -> Io {
        match sweep.resume(input) {
            returns::Io::Done(swept) => {
                self.causes.extend(sweep.report());
                self.stock = sweep.stock();
                self.swept(admission, swept)
            }
            io => {
                self.state = State::Sweeping(admission, sweep);
                Io::Sweep(io)
            }
        }
    }

    /// What a claim of the queue found: news of her purchase, the lead, a wait more, or
    /// her order recorded by a sync, or lost.
    fn claimed(&mut self, claimed: Claimed) -> Io {
        match claimed {
            Claimed::News(news) => self.news(news),
            Claimed::Lead => self.news(News::Lead),
            Claimed::Wait => {
                self.empty_waits += 1;
                self.wait()
            }
            // A sync recorded her order: this purchase's, or one she made before.
            Claimed::Held(order_id) => {
                let own = self.own().ticket;
                self.verdict(match own.order_id() {
                    Ok(id) if id == order_id => Verdict::Ordered,
                    // Its units unknown here, and no matter: she hears 409.
                    _ => Verdict::Duplicate(order_id, own.units()),
                })
            }
            // Redis lost the purchase (a restart): after the admin's sync, her next press
            // hears whether it was committed before.
            Claimed::Lost => self.finish(Err(ApiError::Unavailable(Unavailable::SaleLost))),
        }
    }

    /// Her walk ended at home: `answer` stands, unless another press of hers was handed a
    /// unit back meanwhile, or her walk's sold out is to mark the other buckets.
    fn walk_ended(&mut self, answer: ApiError, ended: WalkEnded) -> Io {
        match ended {
            // Her answer is home's (once: presses racing her cannot send her round for
            // ever).
            WalkEnded::Home if !self.walk.asked_home_again => {
                self.bucket = self.walk_end(None).home;
                self.walk = Walk {
                    asked_home_again: true,
                    ..Walk::default()
                };
                self.decision = None;
                self.state = State::Admitting;
                Io::Redis(self.admit().command())
            }
            WalkEnded::Marked if answer == ApiError::SoldOut && !self.walk.ended_by_mark => {
                let others = self.buckets.as_ref().map_or_else(Vec::new, |buckets| {
                    buckets
                        .all()
                        .iter()
                        .copied()
                        .filter(|bucket| Some(*bucket) != self.home)
                        .collect()
                });
                self.mark_others(answer, others)
            }
            _ => self.finish(Err(answer)),
        }
    }

    /// What went wrong on the way, for the request log; the answer says only "redis" or
    /// "mysql".
    pub fn causes(&self) -> &[String] {
        &self.causes
    }

    /// What admission decided, once it has.
    pub fn decision(&self) -> Option<Decision> {
        self.decision
    }

    /// The buyer's queued purchase: admitted by this press, or by an earlier one.
    pub fn queued(&self) -> Option<Entry> {
        match self.decision? {
            Decision::Admitted(ticket) | Decision::Queued(ticket) => Some(Entry {
                user: self.buyer,
                ticket,
            }),
            _ => None,
        }
    }

    /// The buyer's `201`, as soon as MySQL has committed her order and while this
    /// request publishes the batch it was in: nothing that follows changes her answer (a
    /// publication that fails leaves the batch queued, and the next drainer writes it
    /// again to no effect), so she need not wait for Redis. The purchase still runs to its
    /// end, which answers the same.
    pub fn receipt(&self) -> Option<Receipt> {
        let State::Publishing(drain) = &self.state else {
            return None;
        };
        let own = drain.own?;
        match verdict_of(&drain.committed, own)? {
            Verdict::Ordered => self.receipt_of(own).ok(),
            _ => None,
        }
    }

    fn receipt_of(&self, own: Entry) -> Result<Receipt, LayoutError> {
        let order_id = own.ticket.order_id()?;
        Ok(Receipt {
            order_id,
            voucher_id: self.sale,
            user_id: own.user,
            quantity: own.ticket.units(),
        })
    }

    /// Whether this request holds the voucher's lease (it drains).
    pub fn is_draining(&self) -> bool {
        matches!(self.state, State::Committing(_) | State::Publishing(_))
    }

    /// The lease token and the batch in hand, while draining.
    pub fn drain(&self) -> Option<(&str, &[Entry])> {
        match &self.state {
            State::Committing(drain) | State::Publishing(drain) => {
                Some((&drain.token, &drain.batch))
            }
            _ => None,
        }
    }

    fn own(&self) -> Entry {
        self.queued()
            .expect("only a queued purchase waits for its verdict")
    }

    fn admit(&self) -> Admit {
        Admit {
            voucher_id: self.bucket,
            user: self.buyer,
            limits: self.limits,
            route: match self.home {
                None => Route::Unrouted,
                Some(home) if home == self.bucket => Route::Home,
                Some(_) if self.walk.lone => Route::LoneWalk,
                Some(_) => Route::Walk,
            },
            draw_place: self.draw_place.get(),
            sightings: self.sightings(),
            units: self.units,
            line: self.line,
        }
    }

    /// Goes on with admission's decision: a sweep first when admission handed it this
    /// request.
    fn decided(&mut self, admission: Admission) -> Io {
        self.heard(&admission);
        self.line_figures = admission.line;
        self.stock = None;
        self.sweeping = admission.sweeping;
        if admission.sweep {
            self.decision = Some(admission.decision);
            let (sweep, io) = Returns::sweep(self.bucket);
            self.state = State::Sweeping(admission, sweep);
            return Io::Sweep(io);
        }
        self.admitted(admission)
    }

    fn wait_call(&self) -> Wait {
        Wait {
            voucher_id: self.bucket,
            entry: self.own(),
        }
    }

    fn claim_call(&self) -> Claim {
        Claim {
            voucher_id: self.bucket,
            entry: self.own(),
        }
    }

    /// The reply to `call` as it means it; a failure or a reply it does not understand is
    /// Redis's `503`, with its cause kept.
    fn read<C: Call>(
        &mut self,
        reply: Result<Vec<Reply>, BackendError>,
    ) -> Result<C::Output, ApiError> {
        let cause = match reply.map(C::parse) {
            Ok(Ok(parsed)) => return Ok(parsed),
            Ok(Err(unexpected)) => BackendError::from(unexpected),
            Err(cause) => cause,
        };
        self.causes.push(cause.to_string());
        Err(ApiError::Unavailable(Unavailable::Redis))
    }

    /// The sweep is over: the buyer's admission goes on (units it gave back that fit her
    /// are hers to press for again: [`Purchase::again`]).
    fn swept(&mut self, admission: Admission, swept: Result<u64, BackendError>) -> Io {
        if let Err(cause) = swept {
            self.causes
                .push(format!("sweeping expired orders: {cause}"));
        }
        self.admitted(admission)
    }

    /// A press that was to answer that nothing here is for her (sold out, too few units)
    /// presses again in the same request, rather than answer beside units coming back:
    /// once when the stock its own later steps left in Redis fits her (whoever gave the
    /// units back: its sweep, its drain's publication, a restock they met), and after
    /// each end of the sweep another request was running when admission decided (a
    /// bounded wait). `None`: she hears admission's answer.
    fn again(&mut self) -> Option<Io> {
        if !matches!(
            self.decision,
            Some(
                Decision::SoldOut
                    | Decision::Short { .. }
                    | Decision::BucketOut
                    | Decision::Walk { .. }
            )
        ) {
            return None;
        }
        let fits = self
            .stock
            .is_some_and(|stock| stock >= i64::from(self.units));
        if fits && !self.pressed_again {
            self.pressed_again = true;
            self.state = State::Admitting;
            return Some(Io::Redis(self.admit().command()));
        }
        if self.sweeping && self.sweep_waits < MAX_SWEEP_WAITS {
            self.sweep_waits += 1;
            self.state = State::AwaitingSweep;
            return Some(Io::Redis(
                AwaitSweep {
                    voucher_id: self.bucket,
                }
                .command(),
            ));
        }
        None
    }

    fn admitted(
        &mut self,
        Admission {
            decision, lease, ..
        }: Admission,
    ) -> Io {
        self.decision = Some(decision);
        // A request handed the lease drains before it answers, whatever it was told; it
        // drains until its own purchase is committed when it was just admitted.
        match lease {
            Some(lease) => {
                let own = match decision {
                    Decision::Admitted(_) => self.queued(),
                    _ => None,
                };
                self.drain_batch(Drain {
                    token: lease.token,
                    own,
                    batch: lease.batch,
                    orders: Vec::new(),
                    tries: 0,
                    committed: Vec::new(),
                    after_admission: true,
                })
            }
            None => self.settle(&[]),
        }
    }

    /// The answer once admission decided (and this request drained, when it held the
    /// lease).
    fn settle(&mut self, committed: &[(Entry, Verdict)]) -> Io {
        let decision = self.decision.expect("settled after admission");
        match decision {
            Decision::Admitted(_) => match verdict_of(committed, self.own()) {
                Some(verdict) => self.verdict(verdict),
                None => self.wait(),
            },
            // A second press while her purchase is queued: its outcome if this request
            // just committed it (an order she made with her first press), else a short
            // wait; never a second unit.
            Decision::Queued(ticket) => match verdict_of(committed, self.own()) {
                Some(Verdict::Ordered) => match ticket.order_id() {
                    Ok(order_id) => self.finish(Err(ApiError::AlreadyOrdered { order_id })),
                    Err(error) => {
                        self.causes.push(format!("queue entry: {error}"));
                        self.finish(Err(ApiError::Unavailable(Unavailable::Redis)))
                    }
                },
                Some(verdict) => self.verdict(verdict),
                None => self.finish(Err(ApiError::Busy {
                    retry_after_secs: 1,
                })),
            },
            // The draw's order of hers, of which she hears first now.
            Decision::Won(order_id, quantity) => self.finish(Ok(Receipt {
                order_id,
                voucher_id: self.sale,
                user_id: self.buyer,
                quantity,
            })),
            _ => match self.again() {
                Some(io) => io,
                None => match self.decision_answer() {
                    Ok(io) => io,
                    Err(answer) => self.finish(Err(answer)),
                },
            },
        }
    }

    /// The answer to a decision that queued nothing of the buyer's, or the I/O it needs
    /// first.
    fn decision_answer(&mut self) -> Result<Io, ApiError> {
        match self.decision.expect("after admission") {
            Decision::AlreadyOrdered(order_id) => Err(ApiError::AlreadyOrdered { order_id }),
            Decision::Cancelled(order_id) => Err(ApiError::OrderCancelled { order_id }),
            Decision::Expired(order_id) => Err(ApiError::OrderExpired { order_id }),
            // A bucket marked all out ended her lone walk.
            Decision::SoldOut if self.walking() => {
                self.walk.ended_by_mark = true;
                self.ring.clear();
                self.walk_on()
            }
            Decision::SoldOut => Err(ApiError::SoldOut),
            Decision::Short { left } => Err(ApiError::Short { left }),
            Decision::TooMany { per_buyer } => Err(ApiError::TooMany { per_buyer }),
            Decision::BucketOut => {
                // Her bucket counted this walk among hers under way, the only one.
                if !self.walking() && self.home.is_some() {
                    self.walk.started = Some(Pointer::Counted);
                    self.walk.lone = true;
                }
                self.walk_on()
            }
            Decision::Ended if self.walking() => {
                self.walk.ended = true;
                self.walk_on()
            }
            Decision::Ended => Err(ApiError::Ended),
            Decision::Walk { ended } => {
                self.walk.started = Some(Pointer::Counted);
                self.walk.ended |= ended;
                self.walk_on()
            }
            Decision::Walked(bucket) => {
                if !self.ring.contains(&bucket) {
                    self.causes.push(format!(
                        "her bucket points at {bucket}, no other bucket of the sale"
                    ));
                    return Err(ApiError::Unavailable(Unavailable::Redis));
                }
                self.walk.started = Some(Pointer::At(bucket));
                self.ring.retain(|other| *other != bucket);
                self.ring.insert(0, bucket);
                self.walk_on()
            }
            Decision::InDraw { draw_at_ms, now_ms } => Err(ApiError::InDraw {
                draw_at_ms,
                // Whole seconds to the draw, and at least one: a page polls no faster.
                retry_after_secs: ((draw_at_ms - now_ms).max(1) as u64).div_ceil(1000),
            }),
            Decision::Waitlisted(position) => Err(ApiError::Waitlisted {
                position,
                line: self.line_figures,
            }),
            Decision::NotInLine => Err(ApiError::NotInLine {
                length: self.line_figures.length,
            }),
            Decision::NoLine => Err(ApiError::NoLine),
            Decision::NotStarted => Err(ApiError::NotStarted),
            Decision::Throttled => Err(ApiError::Throttled),
            Decision::Unknown => Err(ApiError::NotFound),
            // Either the voucher does not exist, or Redis lost its sale state (or let it
            // expire long after its end); one request a second asks MySQL which.
            Decision::Missing => {
                let (lookup, io) = VoucherLookup::start(self.bucket);
                Ok(self.looking_up(lookup, io))
            }
            Decision::Admitted(_) | Decision::Queued(_) | Decision::Won(..) | Decision::Buckets => {
                Err(ApiError::Unavailable(Unavailable::Redis))
            }
        }
    }

    fn wait(&mut self) -> Io {
        if self.empty_waits >= MAX_EMPTY_WAITS {
            return self.finish(Err(ApiError::Busy {
                retry_after_secs: 1,
            }));
        }
        self.state = State::Waiting;
        Io::Redis(self.wait_call().command())
    }

    fn news(&mut self, news: News) -> Io {
        match news {
            News::Verdict(verdict) => self.verdict(verdict),
            News::Lead => {
                let own = self.own();
                self.drain_batch(Drain {
                    token: own.to_string(),
                    own: Some(own),
                    batch: Vec::new(),
                    orders: Vec::new(),
                    tries: 0,
                    committed: Vec::new(),
                    after_admission: false,
                })
            }
        }
    }

    /// The buyer's answer for MySQL's verdict on her queued purchase.
    fn verdict(&mut self, verdict: Verdict) -> Io {
        let answer = match verdict {
            Verdict::Ordered => self.receipt_of(self.own()).map_err(|error| {
                self.causes.push(format!("queue entry: {error}"));
                ApiError::Unavailable(Unavailable::Redis)
            }),
            Verdict::Duplicate(order_id, _) | Verdict::Elsewhere(order_id) => {
                Err(ApiError::AlreadyOrdered { order_id })
            }
            // Her order in another bucket is dead: as admission answers for it there.
            Verdict::Cancelled(order_id) => Err(ApiError::OrderCancelled { order_id }),
            Verdict::Expired(order_id) => Err(ApiError::OrderExpired { order_id }),
            Verdict::SoldOut => Err(ApiError::SoldOut),
            // MySQL had fewer units than Redis: how many it had.
            Verdict::Short { left } => Err(ApiError::Short {
                left: u64::from(left),
            }),
            Verdict::IdTaken => Err(ApiError::Unavailable(Unavailable::OrderIdCollision)),
        };
        self.finish(answer)
    }

    /// Goes on with the voucher's lookup.
    fn looked_up(&mut self, mut lookup: VoucherLookup, input: lookup::Input) -> Io {
        let io = lookup.resume(input);
        self.looking_up(lookup, io)
    }

    /// Does what the lookup asks for next, or answers for what it found: a sale that
    /// ended so long ago that Redis let its keys expire comes back, ended; any other sale
    /// Redis holds nothing for was lost, and waits for an admin's sync.
    fn looking_up(&mut self, lookup: VoucherLookup, io: lookup::Io) -> Io {
        let found = match io {
            lookup::Io::Redis(command) => {
                self.state = State::LookingUp(lookup);
                return Io::Redis(command);
            }
            lookup::Io::ReadVoucher => {
                self.state = State::LookingUp(lookup);
                return Io::ReadVoucher;
            }
            lookup::Io::Found(found) => found,
        };
        self.causes.extend_from_slice(lookup.causes());
        let answer = match found {
            Found::Unknown => ApiError::NotFound,
            // A later bucket of a sale, pressed by its id: no voucher of its own.
            Found::Sale { sale: Some(_), .. } if self.home.is_none() => ApiError::NotFound,
            Found::NotNow => not_loaded(),
            Found::Sale {
                restored: Ok(true), ..
            } => ApiError::Ended,
            Found::Sale {
                restored: Ok(false),
                ..
            } => {
                self.causes.push(format!(
                    "no sale state in Redis; POST /vouchers/{}/sync",
                    self.bucket
                ));
                not_loaded()
            }
            Found::Sale {
                restored: Err(cause),
                ..
            }
            | Found::Failed(cause) => {
                self.causes.push(cause.to_string());
                ApiError::Unavailable(cause.unavailable())
            }
        };
        self.finish(Err(answer))
    }

    /// Admission counted its decision; what a queued purchase met after it is counted
    /// here (only for a sale Redis holds, so that unknown ids leave no keys behind).
    fn finish(&mut self, answer: Result<Receipt, ApiError>) -> Io {
        match &answer {
            Err(error @ (ApiError::Busy { .. } | ApiError::Unavailable(_)))
                if self.queued().is_some() =>
            {
                let command = Count {
                    voucher_id: self.bucket,
                    counted: Counted::Purchase(error.code()),
                }
                .command();
                self.state = State::Counting(answer);
                Io::Redis(command)
            }
            _ => self.done(answer),
        }
    }

    fn done(&mut self, answer: Result<Receipt, ApiError>) -> Io {
        self.state = State::Done(answer.clone());
        Io::Answer(answer)
    }
}

fn not_loaded() -> ApiError {
    ApiError::Unavailable(Unavailable::NotLoaded)
}

#[cfg(test)]
mod tests;

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

use serde::Serialize;

use crate::buckets::{Buckets, Spread};
use crate::error::{ApiError, Unavailable};
use crate::ids::{UserId, VoucherId};
use crate::ledger::Ledger;
use crate::order_id::OrderId;
use crate::redis::{Command, Reply};
use crate::returns::{self, Returns};
use crate::sale::{
    Admission, Admit, AskMysql, Call, Claim, Claimed, Count, Counted, Decision, Entry, Installer,
    Limits, Load, MarkAllOut, Marked, MayAsk, News, Next, Pointer, Probed, Publish, Published,
    Route, Sighting, Sightings, Terms, Unlock, Wait, WalkEnd, WalkEnded,
};
pub use crate::sql::Lookup;
use crate::verdict::{Committed, Verdict};

/// Empty waits (each a [`crate::sale::WAIT_SLICE`] `BLPOP` and a claim that found someone
/// draining) before a queued purchase's request answers `busy`: about 10 s. The purchase
/// stays queued, and the buyer's next press hears its outcome.
pub const MAX_EMPTY_WAITS: u32 = 20;
/// Tries of one batch's commit: a batch written twice is committed once, so the second
/// try, on a fresh connection, is safe.
pub const COMMIT_TRIES: u32 = 2;

/// The body of a `201`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub order_id: OrderId,
    pub voucher_id: VoucherId,
    pub user_id: UserId,
}

/// What the purchase needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// `seckill_commit_batch` of these `(order id, buyer)` purchases of the voucher;
    /// resume with [`Input::Committed`]. A commit tried again after a failure wants a
    /// fresh connection.
    Commit(Vec<(OrderId, UserId)>),
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
    Redis(Result<Vec<Reply>, String>),
    Committed(Result<Committed, String>),
    Voucher(Result<Lookup, String>),
    Sweep(returns::Input),
}

/// MySQL's terms of a sale Redis holds nothing for, installed again if it has ended.
#[derive(Debug, Clone)]
struct Restoration {
    terms: Terms,
    highest: VoucherId,
    ledger: Ledger,
    spread: Spread,
}

impl Restoration {
    fn load(&self, voucher_id: VoucherId) -> Load<'_> {
        Load {
            voucher_id,
            installer: Installer::Restoration,
            terms: &self.terms,
            highest: self.highest,
            ledger: self.ledger,
            spread: &self.spread,
        }
    }
}

/// What a press's walk round a sale's buckets met so far (docs/design.md, "Buckets").
#[derive(Debug, Clone, Default)]
struct Walk {
    /// How the walk started at her home bucket: undone there if it finds nothing.
    started: Option<Pointer>,
    /// A bucket answered `ended`: the walk's answer if it finds nothing.
    ended: bool,
    /// Her home had no record of hers when it sent her on this walk: no other walk of
    /// hers is under way, and no bucket holds a purchase of hers.
    lone: bool,
    /// A bucket marked all out ended it: it did not see every bucket empty itself.
    ended_by_mark: bool,
    /// What the buckets it asked knew of the sale's buckets sold out, each place at its
    /// newest sighting: each bucket it asks next hears of them ([`Sightings`]).
    seen_out: Vec<Sighting>,
    /// Her home was asked again once, having come to hold her purchase while she walked.
    asked_home_again: bool,
}

/// A drain in progress: this request holds the lease.
#[derive(Debug, Clone)]
struct Drain {
    token: String,
    /// The drainer's own queued purchase: it drains until that one is published.
    own: Option<Entry>,
    batch: Vec<Entry>,
    /// The batch's order ids, in its order, once the batch is sent to MySQL; `None` for
    /// an entry whose ticket makes no order id (see [`Purchase::drain_batch`]).
    orders: Vec<Option<OrderId>>,
    tries: u32,
    /// MySQL's verdicts on every purchase this request committed.
    committed: Vec<(Entry, Verdict)>,
    /// Admission handed this request the lease (and it answers for `decision` once the
    /// drain ends), rather than its wait.
    after_admission: bool,
}

#[derive(Debug, Clone)]
enum State {
    Admitting,
    Sweeping(Admission, Returns),
    Committing(Drain),
    Publishing(Drain),
    Waiting,
    Claiming,
    Probing,
    AskingMysql,
    Recording(Result<Receipt, ApiError>),
    Restoring(Restoration),
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
        marking: MarkAllOut,
        rest: Vec<VoucherId>,
    },
    Counting(Result<Receipt, ApiError>),
    Done(Result<Receipt, ApiError>),
}

/// One buyer's press.
#[derive(Debug, Clone)]
pub struct Purchase {
    /// The voucher pressed for: the sale.
    sale: VoucherId,
    /// The bucket of the sale this press is at (the sale itself but in a sale of several
    /// buckets: docs/design.md, "Buckets").
    voucher_id: VoucherId,
    /// The buckets still to try once this one is sold out, in order.
    ring: Vec<VoucherId>,
    /// The buyer's own bucket of the sale, once its buckets are known.
    home: Option<VoucherId>,
    /// What this press's walk round the buckets met so far.
    walk: Walk,
    /// The sale's buckets, once known: the buyer's is the first this press tried.
    buckets: Option<Buckets>,
    buyer: UserId,
    /// Her place if this press enters an opening draw: random, so that neither speed nor
    /// pressing again wins a draw (docs/design.md, "The opening draw").
    draw_place: u64,
    limits: Limits,
    state: State,
    decision: Option<Decision>,
    empty_waits: u32,
    causes: Vec<String>,
}

impl Purchase {
    /// A press of `buyer` for `voucher_id`, and what it needs first: admission.
    pub fn start(voucher_id: VoucherId, buyer: UserId) -> (Purchase, Io) {
        Purchase::with_limits(voucher_id, buyer, Limits::SHIPPED)
    }

    /// [`Purchase::start`] with other batch and queue limits: a test's small batches make
    /// a drain of a few buyers span several.
    pub fn with_limits(voucher_id: VoucherId, buyer: UserId, limits: Limits) -> (Purchase, Io) {
        let purchase = Purchase {
            sale: voucher_id,
            voucher_id,
            ring: Vec::new(),
            home: None,
            walk: Walk::default(),
            buckets: None,
            buyer,
            draw_place: (uuid::Uuid::new_v4().as_u128() >> 76) as u64,
            limits,
            state: State::Admitting,
            decision: None,
            empty_waits: 0,
            causes: Vec::new(),
        };
        let admit = purchase.admit();
        (purchase, Io::Redis(admit.command()))
    }

    /// [`Purchase::with_limits`] of a sale whose buckets the caller knows: the press goes
    /// straight to the buyer's.
    pub fn knowing(buckets: Buckets, buyer: UserId, limits: Limits) -> (Purchase, Io) {
        let (mut purchase, _) = Purchase::with_limits(buckets.sale(), buyer, limits);
        let io = purchase.route(buckets);
        (purchase, io)
    }

    /// The bucket this press is at now: its commits and reads are that voucher's.
    pub fn bucket(&self) -> VoucherId {
        self.voucher_id
    }

    /// The sale's buckets, when this press learnt or was told them (a caller keeps them
    /// for the sale's next presses).
    pub fn buckets(&self) -> Option<&Buckets> {
        self.buckets.as_ref()
    }

    /// Sends the press to the buyer's bucket of `buckets`.
    fn route(&mut self, buckets: Buckets) -> Io {
        self.ring = buckets.ring(self.buyer);
        self.buckets = Some(buckets);
        self.voucher_id = self.ring.remove(0);
        self.home = Some(self.voucher_id);
        Io::Redis(self.admit().command())
    }

    /// On to the next bucket of the ring once this one is sold out; `None` after the last.
    fn next_bucket(&mut self) -> Option<Io> {
        if self.ring.is_empty() {
            return None;
        }
        self.voucher_id = self.ring.remove(0);
        self.decision = None;
        self.state = State::Admitting;
        Some(Io::Redis(self.admit().command()))
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next.
    pub fn resume(&mut self, input: Input) -> Io {
        let state = std::mem::replace(&mut self.state, State::Admitting);
        match (state, input) {
            (State::Admitting, Input::Redis(reply)) => match self.read(&self.admit(), reply) {
                Ok(admission) if admission.decision == Decision::Buckets => {
                    self.route(Buckets::new(self.sale, &admission.others))
                }
                Ok(admission) => match self.pointer_at_home(&admission) {
                    Some(command) => {
                        self.state = State::Pointing(admission);
                        Io::Redis(command)
                    }
                    None => self.decided(admission),
                },
                Err(error) => self.finish(Err(error)),
            },
            (State::Pointing(admission), Input::Redis(reply)) => {
                if let Err(cause) = reply {
                    self.causes
                        .push(format!("pointing her bucket at her purchase: {cause}"));
                }
                self.decided(admission)
            }
            (State::Sweeping(admission, mut sweep), Input::Sweep(input)) => {
                match sweep.resume(input) {
                    returns::Io::Done(swept) => {
                        self.causes.extend(sweep.report());
                        self.swept(admission, swept)
                    }
                    io => {
                        self.state = State::Sweeping(admission, sweep);
                        Io::Sweep(io)
                    }
                }
            }
            (State::Committing(drain), Input::Committed(result)) => self.committed(drain, result),
            (State::Publishing(drain), Input::Redis(reply)) => self.published(drain, reply),
            (State::Waiting, Input::Redis(reply)) => match self.read(&self.wait_call(), reply) {
                Ok(Some(news)) => self.news(news),
                Ok(None) => {
                    self.state = State::Claiming;
                    Io::Redis(self.claim_call().command())
                }
                Err(error) => self.finish(Err(error)),
            },
            (State::Claiming, Input::Redis(reply)) => match self.read(&self.claim_call(), reply) {
                Ok(Claimed::News(news)) => self.news(news),
                Ok(Claimed::Lead) => self.news(News::Lead),
                Ok(Claimed::Wait) => {
                    self.empty_waits += 1;
                    self.wait()
                }
                // A sync recorded her order: this purchase's, or one she made before.
                Ok(Claimed::Held(order_id)) => {
                    let own = self.own().ticket.order_id();
                    self.verdict(match own {
                        Ok(own) if own == order_id => Verdict::Ordered,
                        _ => Verdict::Duplicate(order_id),
                    })
                }
                // Redis lost the purchase (a restart): after the admin's sync, her next
                // press hears whether it was committed before.
                Ok(Claimed::Lost) => self.finish(Err(ApiError::Unavailable(Unavailable::SaleLost))),
                Err(error) => self.finish(Err(error)),
            },
            (State::Probing, Input::Redis(reply)) => match self.read(&self.ask(), reply) {
                Ok(MayAsk::Yes) => {
                    self.state = State::AskingMysql;
                    Io::ReadVoucher
                }
                Ok(MayAsk::NotNow) => self.finish(Err(not_loaded())),
                // A slot of a Redis Cluster that knew nothing: it learns the highest id.
                Ok(MayAsk::Unknown(highest)) => self.record(
                    Probed {
                        voucher_id: self.voucher_id,
                        absent: false,
                        highest,
                    },
                    Err(ApiError::NotFound),
                ),
                Err(error) => self.finish(Err(error)),
            },
            (State::AskingMysql, Input::Voucher(lookup)) => match lookup {
                Ok(Lookup {
                    terms: None,
                    highest,
                    ..
                }) => self.record(
                    Probed {
                        voucher_id: self.voucher_id,
                        absent: true,
                        highest,
                    },
                    Err(ApiError::NotFound),
                ),
                // A sale that ended so long ago that Redis let its keys expire comes
                // back, ended; any other sale Redis holds nothing for was lost, and waits
                // for an admin's sync.
                Ok(Lookup {
                    terms: Some(terms),
                    highest,
                    ledger,
                    spread,
                }) => {
                    let restoration = Restoration {
                        terms,
                        highest: highest.unwrap_or(self.voucher_id),
                        ledger,
                        spread,
                    };
                    let command = restoration.load(self.voucher_id).command();
                    self.state = State::Restoring(restoration);
                    Io::Redis(command)
                }
                Err(cause) => {
                    self.causes.push(cause);
                    self.finish(Err(ApiError::Unavailable(Unavailable::Mysql)))
                }
            },
            (State::Restoring(restoration), Input::Redis(reply)) => {
                match self.read(&restoration.load(self.voucher_id), reply) {
                    Ok(true) => self.finish(Err(ApiError::Ended)),
                    Ok(false) => {
                        self.causes.push(format!(
                            "no sale state in Redis; POST /vouchers/{}/sync",
                            self.voucher_id
                        ));
                        self.finish(Err(not_loaded()))
                    }
                    Err(error) => self.finish(Err(error)),
                }
            }
            (State::Recording(answer), Input::Redis(reply)) => {
                if let Err(cause) = reply {
                    self.causes
                        .push(format!("MySQL's answer not kept in Redis: {cause}"));
                }
                self.done(answer)
            }
            (State::EndingWalk(answer), Input::Redis(reply)) => {
                let end = self.walk_end(None);
                match reply.map(|reply| end.parse(reply)) {
                    // Another press of hers was handed a unit back meanwhile: her answer
                    // is home's (once: presses racing her cannot send her round for ever).
                    Ok(Ok(WalkEnded::Home)) if !self.walk.asked_home_again => {
                        self.voucher_id = end.home;
                        self.walk = Walk {
                            asked_home_again: true,
                            ..Walk::default()
                        };
                        self.decision = None;
                        self.state = State::Admitting;
                        Io::Redis(self.admit().command())
                    }
                    Ok(Ok(WalkEnded::Marked))
                        if answer == ApiError::SoldOut && !self.walk.ended_by_mark =>
                    {
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
                    Ok(Ok(_)) => self.finish(Err(answer)),
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
                }
            }
            // Every walk marks the buckets in the same order: one marked already is
            // another walk's, which marks the rest. A mark missed only costs that bucket's
            // crowd a walk: no cause, no 503.
            (
                State::MarkingOthers {
                    answer,
                    marking,
                    rest,
                },
                Input::Redis(reply),
            ) => match reply.map(|reply| marking.parse(reply)) {
                Ok(Ok(Marked::Before)) => self.finish(Err(answer)),
                _ => self.mark_others(answer, rest),
            },
            (State::Unlocking(error), Input::Redis(reply)) => {
                if let Err(cause) = reply {
                    self.causes.push(format!("unlocking the queue: {cause}"));
                }
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

    fn receipt_of(&self, own: Entry) -> Result<Receipt, String> {
        let order_id = own.ticket.order_id().map_err(|error| error.to_string())?;
        Ok(Receipt {
            order_id,
            voucher_id: self.sale,
            user_id: own.user,
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
            voucher_id: self.voucher_id,
            user: self.buyer,
            limits: self.limits,
            route: match self.home {
                None => Route::Unrouted,
                Some(home) if home == self.voucher_id => Route::Home,
                Some(_) if self.walk.lone => Route::LoneWalk,
                Some(_) => Route::Walk,
            },
            draw_place: self.draw_place,
            sightings: self.sightings(),
        }
    }

    /// Where this press is among the sale's buckets, and what its walk gathered.
    fn sightings(&self) -> Sightings {
        let Some(buckets) = self.buckets.as_ref().filter(|_| self.home.is_some()) else {
            return Sightings::default();
        };
        let all = buckets.all();
        Sightings {
            buckets: all.len(),
            here: all
                .iter()
                .position(|bucket| *bucket == self.voucher_id)
                .unwrap_or(0),
            seen: self.walk.seen_out.clone(),
        }
    }

    /// Whether this press is walking: at a bucket of the sale other than the buyer's.
    fn walking(&self) -> bool {
        self.home.is_some_and(|home| home != self.voucher_id)
    }

    /// A walk that found the buyer's record in this bucket points her home bucket at it
    /// first (unless it came here by that pointer), so that her later presses find it
    /// whatever her bucket's marks or the sale's end say.
    fn pointer_at_home(&self, admission: &Admission) -> Option<Command> {
        let holds = matches!(
            admission.decision,
            Decision::Admitted(_)
                | Decision::Queued(_)
                | Decision::AlreadyOrdered(_)
                | Decision::Won(_)
                | Decision::Cancelled(_)
                | Decision::Expired(_)
        );
        if !holds || !self.walking() || self.walk.started == Some(Pointer::At(self.voucher_id)) {
            return None;
        }
        Some(self.walk_end(Some(self.voucher_id)).command())
    }

    /// The end of this press's walk, told to the buyer's home bucket.
    fn walk_end(&self, found: Option<VoucherId>) -> WalkEnd {
        WalkEnd {
            home: self.home.expect("a walk has a home"),
            buyer: self.buyer,
            found,
            started: self.walk.started,
        }
    }

    /// Goes on with admission's decision: a sweep first when admission handed it this
    /// request.
    fn decided(&mut self, admission: Admission) -> Io {
        for &(place, at) in &admission.seen_out {
            match self
                .walk
                .seen_out
                .iter_mut()
                .find(|(known, _)| *known == place)
            {
                Some((_, newest)) => *newest = (*newest).max(at),
                None => self.walk.seen_out.push((place, at)),
            }
        }
        if admission.sweep {
            self.decision = Some(admission.decision);
            let (sweep, io) = Returns::sweep(self.voucher_id);
            self.state = State::Sweeping(admission, sweep);
            return Io::Sweep(io);
        }
        self.admitted(admission)
    }

    /// On round the ring from a bucket with nothing for the buyer; after the last, her
    /// home bucket hears that the walk found nothing, and she hears `sold_out` (or
    /// `ended`, when a bucket said so).
    fn walk_on(&mut self) -> Result<Io, ApiError> {
        if let Some(io) = self.next_bucket() {
            return Ok(io);
        }
        let answer = if self.walk.ended {
            ApiError::Ended
        } else {
            ApiError::SoldOut
        };
        if self.home.is_none() {
            return Err(answer);
        }
        self.state = State::EndingWalk(answer);
        Ok(Io::Redis(self.walk_end(None).command()))
    }

    /// Marks the next of `others` all out, or answers once none is left.
    fn mark_others(&mut self, answer: ApiError, mut rest: Vec<VoucherId>) -> Io {
        let Some(bucket) = rest.pop() else {
            return self.finish(Err(answer));
        };
        let marking = MarkAllOut { bucket };
        self.state = State::MarkingOthers {
            answer,
            marking,
            rest,
        };
        Io::Redis(marking.command())
    }

    fn wait_call(&self) -> Wait {
        Wait {
            voucher_id: self.voucher_id,
            entry: self.own(),
        }
    }

    fn claim_call(&self) -> Claim {
        Claim {
            voucher_id: self.voucher_id,
            entry: self.own(),
        }
    }

    /// The reply to `call` as it means it; a failure or a reply it does not understand is
    /// Redis's `503`, with its cause kept.
    fn read<C: Call>(
        &mut self,
        call: &C,
        reply: Result<Vec<Reply>, String>,
    ) -> Result<C::Output, ApiError> {
        let cause = match reply.map(|reply| call.parse(reply)) {
            Ok(Ok(parsed)) => return Ok(parsed),
            Ok(Err(unexpected)) => unexpected.to_string(),
            Err(cause) => cause,
        };
        self.causes.push(cause);
        Err(ApiError::Unavailable(Unavailable::Redis))
    }

    /// The sweep is over: the buyer's admission stands, unless units came back to a sale
    /// that had none for her: she presses again, in the same request (one that holds the
    /// drain lock drains first instead).
    fn swept(&mut self, admission: Admission, swept: Result<u64, String>) -> Io {
        match swept {
            Ok(given)
                if given > 0
                    && matches!(
                        admission.decision,
                        Decision::SoldOut | Decision::BucketOut | Decision::Walk { .. }
                    )
                    && admission.lease.is_none() =>
            {
                self.state = State::Admitting;
                Io::Redis(self.admit().command())
            }
            Ok(_) => self.admitted(admission),
            Err(cause) => {
                self.causes
                    .push(format!("sweeping expired orders: {cause}"));
                self.admitted(admission)
            }
        }
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

    /// Sends the batch in hand to MySQL; an empty one (a waiter just handed the lease)
    /// goes straight to its publication, which hands out the first batch. An entry whose
    /// ticket makes no order id (admission hands out none: only a Redis written by
    /// something else holds one) can never commit; it is published as `id_taken`, which
    /// gives its unit back, so that it does not block the queue for ever.
    fn drain_batch(&mut self, mut drain: Drain) -> Io {
        drain.orders = drain
            .batch
            .iter()
            .map(|entry| entry.ticket.order_id().ok())
            .collect();
        let orders = commit_of(&drain);
        if orders.is_empty() {
            // Nothing committed, nothing counted: the publication audits nothing.
            return self.publish(drain, Vec::new(), None);
        }
        if orders.len() < drain.batch.len() {
            self.causes
                .push("queue entries with no order id, given up".to_string());
        }
        self.state = State::Committing(drain);
        Io::Commit(orders)
    }

    fn committed(&mut self, mut drain: Drain, result: Result<Committed, String>) -> Io {
        let sent = drain.orders.iter().flatten().count();
        match result {
            Ok(committed) if committed.verdicts.len() == sent => {
                self.publish(drain, committed.verdicts, Some(committed.ledger))
            }
            Ok(committed) => {
                self.causes.push(format!(
                    "mysql: {} verdicts for {sent} purchases",
                    committed.verdicts.len(),
                ));
                self.drain_failed(drain, ApiError::Unavailable(Unavailable::Mysql))
            }
            Err(cause) => {
                self.causes.push(cause);
                drain.tries += 1;
                if drain.tries < COMMIT_TRIES {
                    let orders = commit_of(&drain);
                    self.state = State::Committing(drain);
                    return Io::Commit(orders);
                }
                self.drain_failed(drain, ApiError::Unavailable(Unavailable::Mysql))
            }
        }
    }

    /// MySQL's verdicts stand even when the publication is refused (the lease lapsed and
    /// someone else published the batch) or fails: the batch then stays queued, and the
    /// next drainer writes it again to no effect and publishes it.
    fn publish(&mut self, mut drain: Drain, verdicts: Vec<Verdict>, mysql: Option<Ledger>) -> Io {
        let mut verdicts = verdicts.into_iter();
        let published: Vec<Published> = drain
            .batch
            .iter()
            .zip(&drain.orders)
            .map(|(entry, order_id)| match order_id {
                Some(order_id) => (*entry, *order_id, verdicts.next().expect("one a commit")),
                None => (*entry, OrderId::from_raw(0), Verdict::IdTaken),
            })
            .collect();
        drain.committed.extend(
            published
                .iter()
                .map(|(entry, _, verdict)| (*entry, *verdict)),
        );
        let command = Publish {
            voucher_id: self.voucher_id,
            token: &drain.token,
            own: drain.own,
            batch: &published,
            mysql,
            limits: self.limits,
        }
        .command();
        self.state = State::Publishing(drain);
        Io::Redis(command)
    }

    fn published(&mut self, mut drain: Drain, reply: Result<Vec<Reply>, String>) -> Io {
        // The reply reads alike whatever the batch was: the call is only its reader here.
        let call = Publish {
            voucher_id: self.voucher_id,
            token: &drain.token,
            own: drain.own,
            batch: &[],
            mysql: None,
            limits: self.limits,
        };
        let next = match reply.map(|reply| call.parse(reply)) {
            Ok(Ok(next)) => next,
            Ok(Err(unexpected)) => {
                self.causes
                    .push(format!("publishing a batch failed: {unexpected}"));
                Next::Done
            }
            Err(cause) => {
                self.causes
                    .push(format!("publishing a batch failed: {cause}"));
                Next::Done
            }
        };
        match next {
            Next::Batch(batch) if !batch.is_empty() => {
                drain.batch = batch;
                drain.tries = 0;
                self.drain_batch(drain)
            }
            _ => self.drain_ended(drain),
        }
    }

    fn drain_ended(&mut self, drain: Drain) -> Io {
        if drain.after_admission {
            return self.settle(&drain.committed);
        }
        match verdict_of(&drain.committed, self.own()) {
            Some(verdict) => self.verdict(verdict),
            None => self.wait(),
        }
    }

    /// A drain that could not go on unlocks the queue at once, so that a waiter takes it
    /// over now rather than when the lock lapses. A queued purchase of the buyer's stays
    /// queued (the next drainer commits it) and she hears the failure; anyone else hears
    /// admission's decision.
    fn drain_failed(&mut self, drain: Drain, error: ApiError) -> Io {
        let answer = if self.queued().is_some() {
            error
        } else {
            self.causes
                .push(format!("draining the queue failed: {error}"));
            match self.decision_answer() {
                Err(answer) => answer,
                Ok(io) => return io,
            }
        };
        self.state = State::Unlocking(answer);
        Io::Redis(
            Unlock {
                voucher_id: self.voucher_id,
                token: &drain.token,
            }
            .command(),
        )
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
            Decision::Won(order_id) => self.finish(Ok(Receipt {
                order_id,
                voucher_id: self.sale,
                user_id: self.buyer,
            })),
            _ => match self.decision_answer() {
                Ok(io) => io,
                Err(answer) => self.finish(Err(answer)),
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
            Decision::Waitlisted(position) => Err(ApiError::Waitlisted { position }),
            Decision::NotStarted => Err(ApiError::NotStarted),
            Decision::Throttled => Err(ApiError::Throttled),
            Decision::Unknown => Err(ApiError::NotFound),
            // Either the voucher does not exist, or Redis lost its sale state (or let it
            // expire long after its end); one request a second asks MySQL which.
            Decision::Missing => {
                self.state = State::Probing;
                Ok(Io::Redis(self.ask().command()))
            }
            Decision::Admitted(_) | Decision::Queued(_) | Decision::Won(_) | Decision::Buckets => {
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
            Verdict::Duplicate(order_id) | Verdict::Elsewhere(order_id) => {
                Err(ApiError::AlreadyOrdered { order_id })
            }
            // Her order in another bucket is dead: as admission answers for it there.
            Verdict::Cancelled(order_id) => Err(ApiError::OrderCancelled { order_id }),
            Verdict::Expired(order_id) => Err(ApiError::OrderExpired { order_id }),
            Verdict::SoldOut => Err(ApiError::SoldOut),
            Verdict::IdTaken => Err(ApiError::Unavailable(Unavailable::OrderIdCollision)),
        };
        self.finish(answer)
    }

    /// Keeps MySQL's word in Redis, then answers.
    /// Whether MySQL may be asked about the voucher Redis holds nothing of: one request a
    /// second for purchases and `GET /vouchers/{id}` together.
    fn ask(&self) -> AskMysql {
        AskMysql {
            voucher_id: self.voucher_id,
            probe: true,
        }
    }

    fn record(&mut self, probed: Probed, answer: Result<Receipt, ApiError>) -> Io {
        self.state = State::Recording(answer);
        Io::Redis(probed.command())
    }

    /// Admission counted its decision; what a queued purchase met after it is counted
    /// here (only for a sale Redis holds, so that unknown ids leave no keys behind).
    fn finish(&mut self, answer: Result<Receipt, ApiError>) -> Io {
        match &answer {
            Err(error @ (ApiError::Busy { .. } | ApiError::Unavailable(_)))
                if self.queued().is_some() =>
            {
                let command = Count {
                    voucher_id: self.voucher_id,
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

/// The purchases of a drain's batch that go to MySQL: those with an order id.
fn commit_of(drain: &Drain) -> Vec<(OrderId, UserId)> {
    drain
        .batch
        .iter()
        .zip(&drain.orders)
        .filter_map(|(entry, order_id)| order_id.map(|order_id| (order_id, entry.user)))
        .collect()
}

fn not_loaded() -> ApiError {
    ApiError::Unavailable(Unavailable::NotLoaded)
}

/// MySQL's verdict on `entry` among those a drain committed.
fn verdict_of(committed: &[(Entry, Verdict)], entry: Entry) -> Option<Verdict> {
    committed
        .iter()
        .find(|(committed, _)| *committed == entry)
        .map(|(_, verdict)| *verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order_id::EPOCH;
    use crate::redis::Command;
    use crate::sale::{Terms, Ticket};

    const VOUCHER: VoucherId = VoucherId::from_raw(7);
    const BUYER: UserId = UserId::from_raw(3);

    fn ticket() -> Ticket {
        Ticket::new(EPOCH + 10, 5)
    }

    fn entry() -> Entry {
        Entry {
            user: BUYER,
            ticket: ticket(),
        }
    }

    fn reply(values: &[&str]) -> Input {
        Input::Redis(Ok(values.iter().map(|v| Reply::text(v)).collect()))
    }

    /// Admission's reply: `tag`, the lead flag and the fields, as admission.lua writes them.
    fn admission(tag: &str, lead: bool, rest: &[Reply]) -> Input {
        let mut values = vec![Reply::text(tag), Reply::Int(i64::from(lead))];
        values.extend_from_slice(rest);
        Input::Redis(Ok(values))
    }

    /// A bucket's `bucket_out`, with what it knows of the buckets sold out.
    fn bucket_out(seen: &str) -> Input {
        admission("bucket_out", false, &[Reply::text(seen)])
    }

    fn ticket_fields() -> [Reply; 2] {
        [
            Reply::Int(ticket().seconds()),
            Reply::Int(ticket().sequence()),
        ]
    }

    fn script_of(io: &Io) -> &'static str {
        match io {
            Io::Redis(Command::Script { script, .. }) => script.name,
            Io::Redis(Command::Plain { name, .. }) => name,
            other => panic!("not Redis: {other:?}"),
        }
    }

    /// A lone buyer admitted and handed the lease over her own purchase, and what she
    /// asks for next (its commit).
    fn admitted_with_the_lease() -> (Purchase, Io) {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(admitted_leading());
        (purchase, io)
    }

    /// Admission's reply to a lone buyer: admitted, and holding the lease over her own
    /// purchase, the first batch.
    fn admitted_leading() -> Input {
        let mut lead = ticket_fields().to_vec();
        lead.extend([
            Reply::text(&entry().to_string()),
            Reply::text(&entry().to_string()),
        ]);
        admission("admitted", true, &lead)
    }

    /// The voucher a command names (its first key's hash tag).
    fn bucket_of(io: &Io) -> String {
        let Io::Redis(Command::Script { keys, .. }) = io else {
            panic!("not a script: {io:?}")
        };
        keys[0].split(['{', '}']).nth(1).unwrap().to_string()
    }

    #[test]
    fn a_press_learns_the_buckets_and_walks_them_from_the_buyer_s_until_all_are_out() {
        // Buyer 4 of three buckets (7, 8, 9): hers is the second (4 mod 3).
        let (mut purchase, io) = Purchase::start(VOUCHER, UserId::from_raw(4));
        assert_eq!(bucket_of(&io), "7");
        let io = purchase.resume(admission("buckets", false, &[Reply::text("8,9")]));
        assert_eq!(
            (script_of(&io), bucket_of(&io).as_str()),
            ("admission", "8")
        );
        assert_eq!(sightings_of(&io), ["3", "1", ""], "none gathered yet");
        // Each bucket asked hears what the ones before told her walk, each place at its
        // newest sighting.
        for (told, next, sightings) in [
            ("1:100,0:90", "9", ["3", "2", "1:100,0:90"]),
            ("2:150,0:95", "7", ["3", "0", "1:100,0:95,2:150"]),
        ] {
            let io = purchase.resume(bucket_out(told));
            assert_eq!(
                (script_of(&io), bucket_of(&io).as_str()),
                ("admission", next)
            );
            // Her bucket had no record of hers: the only walk of hers under way.
            assert_eq!(route_of(&io), "lone_walk");
            assert_eq!(sightings_of(&io), sightings);
        }
        // The last said so too: her own bucket hears that the walk it counted found
        // nothing, and answers for them all a moment; so does every other bucket, each
        // marked whatever the one before said.
        let io = purchase.resume(bucket_out(""));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
        assert_eq!(walk_end_of(&io), (String::new(), "counted".to_string()));
        let mut io = purchase.resume(reply(&["marked"]));
        for (other, said) in [
            ("9", Ok(vec![Reply::text("open")])),
            ("7", Err("down".to_string())),
        ] {
            assert_eq!(
                (script_of(&io), bucket_of(&io).as_str()),
                ("walk_end", other)
            );
            assert_eq!(walk_end_of(&io), (String::new(), String::new()), "no buyer");
            io = purchase.resume(Input::Redis(said));
        }
        assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
        assert!(purchase.causes().is_empty(), "{:?}", purchase.causes());

        // Another walk marks them already: the first bucket marked before ends it.
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        purchase.resume(bucket_out(""));
        purchase.resume(bucket_out(""));
        purchase.resume(bucket_out(""));
        let io = purchase.resume(reply(&["marked"]));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "9"));
        let io = purchase.resume(reply(&["marked_before"]));
        assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
        let buckets = purchase.buckets().expect("learnt");
        assert_eq!(buckets.all(), [7, 8, 9].map(VoucherId::from_raw));
    }

    /// Admission's route argument (ARGV[10]).
    fn route_of(io: &Io) -> String {
        let Io::Redis(Command::Script { args, .. }) = io else {
            panic!("not a script: {io:?}")
        };
        args[9].to_string()
    }

    /// Admission's sightings (ARGV[13] to ARGV[15]): the sale's buckets, this one's place,
    /// and what her walk gathered.
    fn sightings_of(io: &Io) -> Vec<String> {
        let Io::Redis(Command::Script { args, .. }) = io else {
            panic!("not a script: {io:?}")
        };
        args[12..15].iter().map(ToString::to_string).collect()
    }

    /// What a walk_end.lua call tells her home: the bucket found, the pointer started from.
    fn walk_end_of(io: &Io) -> (String, String) {
        let Io::Redis(Command::Script { args, .. }) = io else {
            panic!("not a script: {io:?}")
        };
        (args[1].to_string(), args[2].to_string())
    }

    fn three_buckets() -> Buckets {
        Buckets::new(VOUCHER, &[VoucherId::from_raw(8), VoucherId::from_raw(9)])
    }

    #[test]
    fn a_walk_that_finds_her_purchase_points_her_bucket_at_it_first() {
        // Buyer 4's bucket is 8; 8 is sold out, 9 admits her.
        let (mut purchase, io) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("8", "home")
        );
        let io = purchase.resume(bucket_out(""));
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("9", "lone_walk")
        );
        let io = purchase.resume(admission("admitted", false, &ticket_fields()));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
        assert_eq!(walk_end_of(&io), ("9".to_string(), "counted".to_string()));
        // Then on as admitted at 9: waiting for her verdict there.
        let io = purchase.resume(reply(&["pointed"]));
        assert_eq!((script_of(&io), purchase.bucket().raw()), ("BLPOP", 9));
    }

    #[test]
    fn her_bucket_s_pointer_sends_her_press_to_her_purchase_past_marks_and_the_end() {
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        let io = purchase.resume(admission("walked", false, &[Reply::text("7")]));
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("7", "walk")
        );
        // Found there: no second pointer.
        let io = purchase.resume(admission("already_ordered", false, &[Reply::text("55")]));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::AlreadyOrdered {
                order_id: OrderId::from_raw(55)
            }))
        );

        // A pointer at a bucket that has nothing of hers any more: the rest of the ring,
        // then the pointer is cleared.
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        let io = purchase.resume(admission("walked", false, &[Reply::text("7")]));
        assert_eq!(bucket_of(&io), "7");
        let io = purchase.resume(admission("ended", false, &[]));
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("9", "walk")
        );
        let io = purchase.resume(bucket_out(""));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
        assert_eq!(walk_end_of(&io), (String::new(), "w:7".to_string()));
        let io = purchase.resume(reply(&["open"]));
        assert_eq!(io, Io::Answer(Err(ApiError::Ended)), "a bucket said so");
    }

    #[test]
    fn a_lone_walk_ends_at_a_bucket_marked_all_out_and_marks_her_bucket() {
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        let io = purchase.resume(bucket_out(""));
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("9", "lone_walk")
        );
        // 9 is marked: bucket 7 is not asked.
        let io = purchase.resume(admission("sold_out", false, &[]));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
        assert_eq!(walk_end_of(&io), (String::new(), "counted".to_string()));
        let io = purchase.resume(reply(&["marked"]));
        assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
    }

    #[test]
    fn a_walk_under_way_at_her_bucket_sends_her_press_round_every_bucket() {
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        let io = purchase.resume(admission("walk", false, &[Reply::Int(0)]));
        assert_eq!(
            (bucket_of(&io).as_str(), route_of(&io).as_str()),
            ("9", "walk")
        );
        let io = purchase.resume(bucket_out(""));
        assert_eq!(bucket_of(&io), "7");
        let io = purchase.resume(admission("queued", false, &ticket_fields()));
        assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
        assert_eq!(walk_end_of(&io), ("7".to_string(), "counted".to_string()));
    }

    #[test]
    fn a_walk_that_finds_nothing_asks_her_bucket_again_when_it_holds_her_purchase_now() {
        let (mut purchase, _) =
            Purchase::knowing(three_buckets(), UserId::from_raw(4), Limits::SHIPPED);
        purchase.resume(bucket_out(""));
        purchase.resume(bucket_out(""));
        let io = purchase.resume(bucket_out(""));
        assert_eq!(script_of(&io), "walk_end");
        // Another press of hers was handed a unit given back at home meanwhile.
        let io = purchase.resume(reply(&["home"]));
        assert_eq!(
            (
                script_of(&io),
                bucket_of(&io).as_str(),
                route_of(&io).as_str()
            ),
            ("admission", "8", "home")
        );
        let io = purchase.resume(admission("queued", false, &ticket_fields()));
        assert_eq!((script_of(&io), purchase.bucket().raw()), ("count", 8));
        let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::Busy {
                retry_after_secs: 1
            }))
        );
    }

    #[test]
    fn a_press_that_knows_the_buckets_buys_at_the_buyer_s_and_names_the_voucher() {
        let buckets = Buckets::new(VOUCHER, &[VoucherId::from_raw(8)]);
        let (mut purchase, io) = Purchase::knowing(buckets, BUYER, Limits::SHIPPED);
        assert_eq!(bucket_of(&io), "8");
        let io = purchase.resume(admitted_leading());
        let order_id = ticket().order_id().unwrap();
        assert_eq!(io, Io::Commit(vec![(order_id, BUYER)]));
        assert_eq!(purchase.bucket(), VoucherId::from_raw(8), "commits there");
        purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::Ordered],
            ledger: Ledger {
                orders: 1,
                returned_event: 0,
            },
            created: 1,
        })));
        let receipt = purchase.receipt().expect("committed");
        assert_eq!(
            receipt.voucher_id, VOUCHER,
            "the voucher she bought, not its bucket"
        );
    }

    #[test]
    fn another_bucket_s_order_is_already_ordered() {
        let (mut purchase, _) = admitted_with_the_lease();
        let held = OrderId::from_raw(77);
        purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::Elsewhere(held)],
            ledger: Ledger::default(),
            created: 0,
        })));
        let io = purchase.resume(reply(&["done"]));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::AlreadyOrdered { order_id: held }))
        );
    }

    #[test]
    fn another_bucket_s_dead_order_is_told_as_it_became() {
        let held = OrderId::from_raw(77);
        for (verdict, answer) in [
            (
                Verdict::Cancelled(held),
                ApiError::OrderCancelled { order_id: held },
            ),
            (
                Verdict::Expired(held),
                ApiError::OrderExpired { order_id: held },
            ),
        ] {
            let (mut purchase, _) = admitted_with_the_lease();
            purchase.resume(Input::Committed(Ok(Committed {
                verdicts: vec![verdict],
                ledger: Ledger::default(),
                created: 0,
            })));
            let io = purchase.resume(reply(&["done"]));
            assert_eq!(io, Io::Answer(Err(answer)));
        }
    }

    #[test]
    fn a_lone_buyer_drains_her_own_purchase_and_hears_201() {
        let (_, io) = Purchase::start(VOUCHER, BUYER);
        assert_eq!(script_of(&io), "admission");
        let (mut purchase, io) = admitted_with_the_lease();
        let order_id = ticket().order_id().unwrap();
        assert_eq!(io, Io::Commit(vec![(order_id, BUYER)]));
        assert_eq!(purchase.receipt(), None, "nothing is committed yet");
        let io = purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::Ordered],
            ledger: Ledger {
                orders: 1,
                returned_event: 0,
            },
            created: 1,
        })));
        assert_eq!(script_of(&io), "publish");
        let receipt = Receipt {
            order_id,
            voucher_id: VOUCHER,
            user_id: BUYER,
        };
        assert_eq!(
            purchase.receipt(),
            Some(receipt.clone()),
            "known before Redis"
        );
        let io = purchase.resume(reply(&["done"]));
        assert_eq!(io, Io::Answer(Ok(receipt)));
    }

    #[test]
    fn her_receipt_stands_when_the_publication_after_it_fails() {
        let (mut purchase, _) = admitted_with_the_lease();
        purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::Ordered],
            ledger: Ledger {
                orders: 1,
                returned_event: 0,
            },
            created: 1,
        })));
        let receipt = purchase.receipt().expect("committed");
        let io = purchase.resume(Input::Redis(Err("redis: gone".into())));
        assert_eq!(io, Io::Answer(Ok(receipt)));
    }

    #[test]
    fn a_buyer_refused_by_mysql_has_no_receipt() {
        let (mut purchase, _) = admitted_with_the_lease();
        let io = purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::SoldOut],
            ledger: Ledger::default(),
            created: 0,
        })));
        assert_eq!(script_of(&io), "publish");
        assert_eq!(purchase.receipt(), None);
    }

    #[test]
    fn a_commit_failing_twice_leaves_her_purchase_queued_and_is_counted() {
        let (mut purchase, first) = admitted_with_the_lease();
        let again = purchase.resume(Input::Committed(Err("mysql: gone".into())));
        assert_eq!(again, first, "tried again");
        let io = purchase.resume(Input::Committed(Err("mysql: gone".into())));
        assert_eq!(
            script_of(&io),
            "unlock",
            "a drainer that gives up unlocks at once"
        );
        let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(script_of(&io), "count");
        let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::Unavailable(Unavailable::Mysql)))
        );
        assert_eq!(purchase.causes(), ["mysql: gone", "mysql: gone"]);
    }

    #[test]
    fn a_waiter_hears_her_verdict_or_gives_up_busy() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(admission("admitted", false, &ticket_fields()));
        assert_eq!(script_of(&io), "BLPOP");
        let done = purchase.clone().resume(reply(&["key", "duplicate:99"]));
        assert_eq!(
            done,
            Io::Answer(Err(ApiError::AlreadyOrdered {
                order_id: OrderId::from_raw(99)
            }))
        );
        let mut io = io;
        for _ in 0..MAX_EMPTY_WAITS {
            assert_eq!(script_of(&io), "BLPOP");
            assert_eq!(
                script_of(&purchase.resume(Input::Redis(Ok(vec![Reply::Nil])))),
                "claim"
            );
            io = purchase.resume(reply(&["wait"]));
        }
        assert_eq!(script_of(&io), "count");
        let io = purchase.resume(Input::Redis(Err("redis: gone".into())));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::Busy {
                retry_after_secs: 1
            }))
        );
        assert_eq!(purchase.causes(), ["counting busy: redis: gone"]);
    }

    #[test]
    fn each_decision_of_admission_has_its_answer() {
        let order = Reply::text("42");
        let cases = [
            ("sold_out", vec![], Err(ApiError::SoldOut)),
            ("ended", vec![], Err(ApiError::Ended)),
            ("not_started", vec![], Err(ApiError::NotStarted)),
            ("throttled", vec![], Err(ApiError::Throttled)),
            ("unknown", vec![], Err(ApiError::NotFound)),
            (
                "already_ordered",
                vec![order],
                Err(ApiError::AlreadyOrdered {
                    order_id: OrderId::from_raw(42),
                }),
            ),
        ];
        for (tag, fields, answer) in cases {
            let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
            assert_eq!(
                purchase.resume(admission(tag, false, &fields)),
                Io::Answer(answer),
                "{tag}"
            );
        }
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(admission("queued", false, &ticket_fields()));
        assert_eq!(
            script_of(&io),
            "count",
            "a second press while queued is busy"
        );
    }

    #[test]
    fn missing_sale_state_asks_mysql_once_a_second() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(admission("missing", false, &[]));
        assert_eq!(script_of(&io), "lookup");
        let mut unknown = purchase.clone();
        let mut above = purchase.clone();
        assert_eq!(
            purchase.resume(Input::Redis(Ok(vec![Reply::text("wait")]))),
            Io::Answer(Err(not_loaded())),
            "another request asks MySQL this second"
        );
        assert_eq!(
            unknown.resume(Input::Redis(Ok(vec![Reply::text("ask")]))),
            Io::ReadVoucher
        );
        // Above the deployment's highest id (a cluster's slot that knew nothing): not
        // found without MySQL, and the slot learns the highest.
        let io = above.resume(Input::Redis(Ok(vec![
            Reply::text("unknown"),
            Reply::text("9"),
        ])));
        assert_eq!(script_of(&io), "probed");
        assert_eq!(
            above.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Answer(Err(ApiError::NotFound))
        );
        let mut exists = unknown.clone();
        let highest = Some(VoucherId::from_raw(9));
        let io = unknown.resume(Input::Voucher(Ok(Lookup {
            terms: None,
            highest,
            ledger: Ledger::default(),
            spread: Spread::Whole,
        })));
        assert_eq!(script_of(&io), "probed");
        assert_eq!(
            unknown.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Answer(Err(ApiError::NotFound))
        );
        let terms = Terms {
            stock: 0,
            begin_ms: 0,
            end_ms: 1,
            initial_stock: 1,
            title: "t".into(),
            description: String::new(),
            pay_within_s: 900,
            draw_ms: 0,
        };
        let io = exists.resume(Input::Voucher(Ok(Lookup {
            terms: Some(terms),
            highest,
            ledger: Ledger::default(),
            spread: Spread::Whole,
        })));
        assert_eq!(script_of(&io), "load", "an ended sale is restored");
        let mut live = exists.clone();
        assert_eq!(
            exists.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Answer(Err(ApiError::Ended))
        );
        assert_eq!(
            live.resume(Input::Redis(Ok(vec![Reply::Int(0)]))),
            Io::Answer(Err(not_loaded())),
            "a sale that has not ended waits for a sync"
        );
    }

    #[test]
    fn an_unreadable_reply_is_a_503_with_its_cause() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(reply(&["whatever"]));
        assert_eq!(
            io,
            Io::Answer(Err(ApiError::Unavailable(Unavailable::Redis)))
        );
        assert_eq!(purchase.causes().len(), 1);
    }
}

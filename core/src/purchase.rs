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

use crate::error::ApiError;
use crate::ids::{UserId, VoucherId};
use crate::order_id::OrderId;
use crate::redis::{Command, Reply};
use crate::sale::{self, Admission, Claim, Decision, Entry, Limits, News, Next, Probe, Published};
use crate::verdict::{Committed, Verdict};

/// Empty waits (each a [`sale::WAIT_SLICE`] `BLPOP` and a claim that found someone
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
    /// Whether MySQL has a voucher of this id; resume with [`Input::Exists`].
    VoucherExists,
    /// The buyer's answer: the purchase is over.
    Answer(Result<Receipt, ApiError>),
}

/// The result of what the purchase asked for; a failure is its cause, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Redis(Result<Vec<Reply>, String>),
    Committed(Result<Committed, String>),
    Exists(Result<bool, String>),
}

/// A drain in progress: this request holds the lease.
#[derive(Debug, Clone)]
struct Drain {
    token: String,
    /// The drainer's own queued purchase: it drains until that one is published.
    own: Option<Entry>,
    batch: Vec<Entry>,
    /// The batch's order ids with their buyers, once the batch is sent to MySQL.
    orders: Vec<(OrderId, UserId)>,
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
    Committing(Drain),
    Publishing(Drain),
    Waiting,
    Claiming,
    Probing,
    AskingMysql,
    MarkingAbsent,
    Counting(Result<Receipt, ApiError>),
    Done(Result<Receipt, ApiError>),
}

/// One buyer's press.
#[derive(Debug, Clone)]
pub struct Purchase {
    voucher_id: VoucherId,
    buyer: UserId,
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
            voucher_id,
            buyer,
            limits,
            state: State::Admitting,
            decision: None,
            empty_waits: 0,
            causes: Vec::new(),
        };
        (purchase, Io::Redis(sale::admit(voucher_id, buyer, limits)))
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next.
    pub fn resume(&mut self, input: Input) -> Io {
        let state = std::mem::replace(&mut self.state, State::Admitting);
        match (state, input) {
            (State::Admitting, Input::Redis(reply)) => {
                match self.parsed(reply, sale::parse_admission) {
                    Ok(admission) => self.admitted(admission),
                    Err(error) => self.finish(Err(error)),
                }
            }
            (State::Committing(drain), Input::Committed(result)) => self.committed(drain, result),
            (State::Publishing(drain), Input::Redis(reply)) => self.published(drain, reply),
            (State::Waiting, Input::Redis(reply)) => match self.parsed(reply, sale::parse_wait) {
                Ok(Some(news)) => self.news(news),
                Ok(None) => {
                    self.state = State::Claiming;
                    Io::Redis(sale::claim(self.voucher_id, self.own()))
                }
                Err(error) => self.finish(Err(error)),
            },
            (State::Claiming, Input::Redis(reply)) => match self.parsed(reply, sale::parse_claim) {
                Ok(Claim::News(news)) => self.news(news),
                Ok(Claim::Lead) => self.news(News::Lead),
                Ok(Claim::Wait) => {
                    self.empty_waits += 1;
                    self.wait()
                }
                // A sync recorded her order: this purchase's, or one she made before.
                Ok(Claim::Held(order_id)) => {
                    let own = self.own().ticket.order_id();
                    self.verdict(match own {
                        Ok(own) if own == order_id => Verdict::Ordered,
                        _ => Verdict::Duplicate(order_id),
                    })
                }
                // Redis lost the purchase (a restart): after the admin's sync, her next
                // press hears whether it was committed before.
                Ok(Claim::Lost) => self.finish(Err(ApiError::Unavailable(
                    "the sale state was lost; retry after it is loaded again".into(),
                ))),
                Err(error) => self.finish(Err(error)),
            },
            (State::Probing, Input::Redis(reply)) => match self.parsed(reply, sale::parse_set_nx) {
                Ok(true) => {
                    self.state = State::AskingMysql;
                    Io::VoucherExists
                }
                Ok(false) => self.finish(Err(not_loaded())),
                Err(error) => self.finish(Err(error)),
            },
            (State::AskingMysql, Input::Exists(exists)) => match exists {
                Ok(false) => {
                    self.state = State::MarkingAbsent;
                    Io::Redis(sale::mark_absent(self.voucher_id))
                }
                Ok(true) => {
                    self.causes.push(format!(
                        "no sale state in Redis; POST /vouchers/{}/sync",
                        self.voucher_id
                    ));
                    self.finish(Err(not_loaded()))
                }
                Err(cause) => {
                    self.causes.push(cause);
                    self.finish(Err(ApiError::Unavailable("mysql".into())))
                }
            },
            (State::MarkingAbsent, Input::Redis(reply)) => {
                if let Err(cause) = reply {
                    self.causes
                        .push(format!("its absence not kept in Redis: {cause}"));
                }
                self.done(Err(ApiError::NotFound))
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

    fn parsed<T>(
        &mut self,
        reply: Result<Vec<Reply>, String>,
        parse: impl FnOnce(Vec<Reply>) -> Result<T, crate::redis::UnexpectedReply>,
    ) -> Result<T, ApiError> {
        let cause = match reply.map(parse) {
            Ok(Ok(parsed)) => return Ok(parsed),
            Ok(Err(unexpected)) => unexpected.to_string(),
            Err(cause) => cause,
        };
        self.causes.push(cause);
        Err(ApiError::Unavailable("redis".into()))
    }

    fn admitted(&mut self, Admission { decision, lease }: Admission) -> Io {
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
    /// goes straight to its publication, which hands out the first batch.
    fn drain_batch(&mut self, mut drain: Drain) -> Io {
        let orders = drain
            .batch
            .iter()
            .map(|entry| Ok((entry.ticket.order_id()?, entry.user)))
            .collect::<Result<Vec<_>, crate::order_id::LayoutError>>();
        match orders {
            Ok(orders) if orders.is_empty() => self.publish(
                drain,
                Committed {
                    verdicts: Vec::new(),
                    orders: 0,
                },
            ),
            Ok(orders) => {
                drain.orders = orders.clone();
                self.state = State::Committing(drain);
                Io::Commit(orders)
            }
            // Admission hands out no such ticket: only a Redis written by something else
            // holds one.
            Err(error) => {
                self.causes.push(format!("queue entry: {error}"));
                self.drain_failed(ApiError::Unavailable("redis".into()))
            }
        }
    }

    fn committed(&mut self, mut drain: Drain, result: Result<Committed, String>) -> Io {
        match result {
            Ok(committed) if committed.verdicts.len() == drain.batch.len() => {
                self.publish(drain, committed)
            }
            Ok(committed) => {
                self.causes.push(format!(
                    "mysql: {} verdicts for {} purchases",
                    committed.verdicts.len(),
                    drain.batch.len()
                ));
                self.drain_failed(ApiError::Unavailable("mysql".into()))
            }
            Err(cause) => {
                self.causes.push(cause);
                drain.tries += 1;
                if drain.tries < COMMIT_TRIES {
                    let orders = drain.orders.clone();
                    self.state = State::Committing(drain);
                    return Io::Commit(orders);
                }
                self.drain_failed(ApiError::Unavailable("mysql".into()))
            }
        }
    }

    /// MySQL's verdicts stand even when the publication is refused (the lease lapsed and
    /// someone else published the batch) or fails: the batch then stays queued, and the
    /// next drainer writes it again to no effect and publishes it.
    fn publish(&mut self, mut drain: Drain, committed: Committed) -> Io {
        let published: Vec<Published> = drain
            .batch
            .iter()
            .zip(&drain.orders)
            .zip(&committed.verdicts)
            .map(|((entry, (order_id, _)), verdict)| (*entry, *order_id, *verdict))
            .collect();
        drain
            .committed
            .extend(drain.batch.iter().copied().zip(committed.verdicts));
        let command = sale::publish(
            self.voucher_id,
            &drain.token,
            drain.own,
            &published,
            committed.orders,
            self.limits,
        );
        self.state = State::Publishing(drain);
        Io::Redis(command)
    }

    fn published(&mut self, mut drain: Drain, reply: Result<Vec<Reply>, String>) -> Io {
        let next = match reply.map(sale::parse_next) {
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
                drain.orders.clear();
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

    /// A drain that could not go on: a queued purchase of the buyer's stays queued (the
    /// next drainer commits it) and she hears the failure; anyone else hears admission's
    /// decision.
    fn drain_failed(&mut self, error: ApiError) -> Io {
        if self.queued().is_some() {
            return self.finish(Err(error));
        }
        self.causes
            .push(format!("draining the queue failed: {error}"));
        self.settle(&[])
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
                        self.finish(Err(ApiError::Unavailable("redis".into())))
                    }
                },
                Some(verdict) => self.verdict(verdict),
                None => self.finish(Err(ApiError::Busy {
                    retry_after_secs: 1,
                })),
            },
            Decision::AlreadyOrdered(order_id) => {
                self.finish(Err(ApiError::AlreadyOrdered { order_id }))
            }
            Decision::SoldOut => self.finish(Err(ApiError::SoldOut)),
            Decision::Ended => self.finish(Err(ApiError::Ended)),
            Decision::NotStarted => self.finish(Err(ApiError::NotStarted)),
            Decision::Throttled => self.finish(Err(ApiError::Throttled)),
            Decision::Unknown => self.finish(Err(ApiError::NotFound)),
            // Either the voucher does not exist (which Redis then keeps, for a minute),
            // or Redis lost its sale state and an admin must sync it from MySQL; one
            // request a second asks MySQL which.
            Decision::Missing => {
                self.state = State::Probing;
                Io::Redis(sale::take_probe(Probe::Purchase(self.voucher_id)))
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
        Io::Redis(sale::wait(self.voucher_id, self.own()))
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
        let own = self.own();
        let answer = match verdict {
            Verdict::Ordered => match own.ticket.order_id() {
                Ok(order_id) => Ok(Receipt {
                    order_id,
                    voucher_id: self.voucher_id,
                    user_id: own.user,
                }),
                Err(error) => {
                    self.causes.push(format!("queue entry: {error}"));
                    Err(ApiError::Unavailable("redis".into()))
                }
            },
            Verdict::Duplicate(order_id) => Err(ApiError::AlreadyOrdered { order_id }),
            Verdict::SoldOut => Err(ApiError::SoldOut),
            Verdict::IdTaken => Err(ApiError::Unavailable("order id collision; retry".into())),
        };
        self.finish(answer)
    }

    /// Admission counted its decision; what a queued purchase met after it is counted
    /// here (only for a sale Redis holds, so that unknown ids leave no keys behind).
    fn finish(&mut self, answer: Result<Receipt, ApiError>) -> Io {
        match &answer {
            Err(error @ (ApiError::Busy { .. } | ApiError::Unavailable(_)))
                if self.queued().is_some() =>
            {
                let command = sale::count_outcome(self.voucher_id, error.code());
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
    ApiError::Unavailable("sale state not loaded".into())
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
    use crate::sale::Ticket;

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

    #[test]
    fn a_lone_buyer_drains_her_own_purchase_and_hears_201() {
        let (mut purchase, io) = Purchase::start(VOUCHER, BUYER);
        assert_eq!(script_of(&io), "admission");
        let mut lead = ticket_fields().to_vec();
        lead.extend([
            Reply::text(&entry().to_string()),
            Reply::text(&entry().to_string()),
        ]);
        let io = purchase.resume(admission("admitted", true, &lead));
        let order_id = ticket().order_id().unwrap();
        assert_eq!(io, Io::Commit(vec![(order_id, BUYER)]));
        let io = purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![Verdict::Ordered],
            orders: 1,
        })));
        assert_eq!(script_of(&io), "publish");
        let io = purchase.resume(reply(&["done"]));
        assert_eq!(
            io,
            Io::Answer(Ok(Receipt {
                order_id,
                voucher_id: VOUCHER,
                user_id: BUYER
            }))
        );
    }

    #[test]
    fn a_commit_failing_twice_leaves_her_purchase_queued_and_is_counted() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let mut lead = ticket_fields().to_vec();
        lead.extend([
            Reply::text(&entry().to_string()),
            Reply::text(&entry().to_string()),
        ]);
        let first = purchase.resume(admission("admitted", true, &lead));
        let again = purchase.resume(Input::Committed(Err("mysql: gone".into())));
        assert_eq!(again, first, "tried again");
        let io = purchase.resume(Input::Committed(Err("mysql: gone".into())));
        assert_eq!(script_of(&io), "HINCRBY");
        let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(io, Io::Answer(Err(ApiError::Unavailable("mysql".into()))));
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
        assert_eq!(script_of(&io), "HINCRBY");
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
            "HINCRBY",
            "a second press while queued is busy"
        );
    }

    #[test]
    fn missing_sale_state_asks_mysql_once_a_second() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(admission("missing", false, &[]));
        assert_eq!(script_of(&io), "SET");
        let mut unknown = purchase.clone();
        assert_eq!(
            purchase.resume(Input::Redis(Ok(vec![Reply::Nil]))),
            Io::Answer(Err(not_loaded())),
            "another request asks MySQL this second"
        );
        assert_eq!(
            unknown.resume(Input::Redis(Ok(vec![Reply::Status("OK".into())]))),
            Io::VoucherExists
        );
        let mut exists = unknown.clone();
        assert_eq!(script_of(&unknown.resume(Input::Exists(Ok(false)))), "SET");
        assert_eq!(
            unknown.resume(Input::Redis(Ok(vec![Reply::Status("OK".into())]))),
            Io::Answer(Err(ApiError::NotFound))
        );
        assert_eq!(
            exists.resume(Input::Exists(Ok(true))),
            Io::Answer(Err(not_loaded()))
        );
    }

    #[test]
    fn an_unreadable_reply_is_a_503_with_its_cause() {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER);
        let io = purchase.resume(reply(&["whatever"]));
        assert_eq!(io, Io::Answer(Err(ApiError::Unavailable("redis".into()))));
        assert_eq!(purchase.causes().len(), 1);
    }
}

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use proptest::test_runner::TestCaseError;
use redis::AsyncCommands;

use seckill_core::purchase::{Input, Io, Receipt};
use seckill_core::redis::Command;
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{Decision, Entry, LineAsk, PublishedEntry, Record};
use seckill_core::sql::Status;
use seckill_core::{ApiError, OrderId, Unavailable, UserId};
use seckill_tests::promise;

use super::world::{units_asked, user, Answer, Checked, Phase, Request, World};
use super::{GIVE_BACK_PAGE, LOOKS_ORDERED, UNITS_WAITING};

impl World {
    /// The buyer's `201` as the component sends it, once her order is committed and
    /// before its batch's publication: it must hold from then on, whatever follows.
    pub(super) async fn early_answer(&mut self, i: usize) -> Checked {
        let request = &self.requests[i];
        let Some(receipt) = request.flight.purchase.receipt() else {
            return Ok(());
        };
        if request.heard {
            return Ok(());
        }
        let (id, buyer) = (request.id, request.buyer);
        self.requests[i].heard = true;
        self.log.push(format!(
            "#{id} (buyer {buyer}) hears 201 {} before its batch's publication",
            receipt.order_id
        ));
        let theirs = self.order_of(buyer).await;
        promise!(
            self,
            theirs == Some(receipt.order_id) && receipt.user_id == user(buyer),
            "an early 201 {} but MySQL has {theirs:?}",
            receipt.order_id
        );
        self.told_order.push((receipt.order_id, buyer));
        Ok(())
    }

    /// Stock and queue before a publication, to check what it did.
    pub(super) async fn publication_before(&self, io: &Io) -> Option<(Option<i64>, Vec<Entry>)> {
        match io {
            Io::Redis(Command::Script { script, .. }) if script.name == "publish" => {
                Some((self.sale.stock().await, self.sale.queue().await))
            }
            _ => None,
        }
    }

    /// A publication trims its batch off the queue, zeroes Redis stock for a `sold_out`
    /// and gives an `id_taken`'s unit back; a refused one leaves stock and queue alone.
    pub(super) async fn check_publication(
        &mut self,
        io: &Io,
        input: &Input,
        before: Option<(Option<i64>, Vec<Entry>)>,
    ) -> Checked {
        let (Some((stock_before, queue_before)), Some((outcomes, mysql_left))) =
            (before, publication_outcomes(io))
        else {
            return Ok(());
        };
        let Input::Redis(Ok(reply)) = input else {
            return Ok(());
        };
        let refused = reply.first().is_some_and(|tag| tag.is_tag("lost"));
        let count = outcomes.len();
        let (stock_after, queue_after) = (self.sale.stock().await, self.sale.queue().await);
        let (expected_stock, expected_queue) = if refused {
            (stock_before, queue_before.clone())
        } else {
            let after = queue_before[count.min(queue_before.len())..].to_vec();
            // A sold_out leaves MySQL's units less those the purchases queued after the
            // batch hold; an id taken gives its purchase's units back; a duplicate its
            // units less that order's.
            let queued_after: i64 = after.iter().map(|e| i64::from(e.ticket.units())).sum();
            let mut wiped = false;
            let stock = outcomes.iter().fold(stock_before, |stock, told| {
                let units = i64::from(told.units);
                let asked = |stock: Option<i64>, entry: &str| {
                    let asked = Entry::parse(entry).map_or(1, |e| i64::from(e.ticket.units()));
                    stock.map(|s| s + asked)
                };
                match told.outcome.as_str() {
                    "sold_out" | "short" if !wiped => {
                        wiped = true;
                        mysql_left.map(|left| (left - queued_after).max(0))
                    }
                    "id_taken" if !wiped => asked(stock, &told.entry),
                    "duplicate" if !wiped => asked(stock, &told.entry).map(|s| s - units),
                    _ => stock,
                }
            });
            (stock, after)
        };
        let stale = self.note_stale().await?;
        promise!(
            self,
            stale || (stock_after == expected_stock && queue_after == expected_queue),
            "publication left stock {stock_after:?} and queue {queue_after:?} \
             (before: {stock_before:?}, {queue_before:?})"
        );
        Ok(())
    }

    /// A publication that found Redis behind MySQL marks the sale stale: admission then
    /// answers `missing` until the admin's sync. Returns whether the sale is stale.
    pub(super) async fn note_stale(&mut self) -> Result<bool, TestCaseError> {
        let stale = self.sale.stale().await;
        if stale {
            promise!(
                self,
                self.loaded != Some(true) || !self.recovered,
                "a publication found Redis behind MySQL, though Redis lost nothing"
            );
            self.loaded = Some(false);
        }
        Ok(stale)
    }

    /// If the i-th request answered, it leaves, and its answer is checked and kept.
    pub(super) async fn ended(&mut self, i: usize) -> Checked {
        let Some(answer) = self.requests[i].flight.answer().cloned() else {
            return Ok(());
        };
        let request = self.requests.remove(i);
        // An answer of admission's own stands for the moment it decided; one from
        // MySQL's verdict for now.
        let from_admission = matches!(
            request.flight.purchase.decision(),
            Some(
                Decision::SoldOut
                    | Decision::Ended
                    | Decision::NotStarted
                    | Decision::AlreadyOrdered(_)
            )
        );
        let decided = if from_admission {
            request.decided
        } else {
            self.now()
        };
        self.answer(&request, answer, decided).await
    }

    /// A request's answer, standing for the moment `decided`.
    async fn answer(&mut self, request: &Request, answer: Answer, decided: (bool, u64)) -> Checked {
        let (id, buyer, asked) = (request.id, request.buyer, request.units);
        self.log
            .push(format!("#{id} (buyer {buyer}) answers {}", show(&answer)));
        // A look answers an order only to a buyer who joined the line or held a purchase
        // when it began: it never takes units for her.
        if matches!(answer, Ok(_) | Err(ApiError::AlreadyOrdered { .. })) {
            promise!(
                self,
                request.ask != LineAsk::Look || request.had,
                "a look of buyer {buyer}, who never joined the line nor held a purchase, \
                 answers {}",
                show(&answer)
            );
            if request.ask == LineAsk::Look && answer.is_ok() {
                LOOKS_ORDERED.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The line hands a buyer the units she asked for when she joined: as many as she
        // asks for now, but after a Redis loss brought an old place of hers back.
        let joined = self.joined.contains(&buyer);
        let theirs = self.order_of(buyer).await;
        // An order MySQL lost after its commit may be told before a heal puts it back.
        let lost = |order: &OrderId| theirs.is_none() && self.lost_orders.contains(order);
        match &answer {
            Ok(receipt) => {
                promise!(
                    self,
                    (theirs == Some(receipt.order_id) || lost(&receipt.order_id))
                        && receipt.user_id == user(buyer)
                        && (receipt.quantity == asked || joined),
                    "201 {} of {} units but MySQL has {theirs:?}",
                    receipt.order_id,
                    receipt.quantity
                );
                self.told_order.push((receipt.order_id, buyer));
            }
            Err(ApiError::AlreadyOrdered { order_id }) => {
                promise!(
                    self,
                    theirs == Some(*order_id) || lost(order_id),
                    "already_ordered {order_id} but MySQL has {theirs:?}"
                );
                self.told_order.push((*order_id, buyer));
            }
            Err(ApiError::OrderCancelled { order_id } | ApiError::OrderExpired { order_id }) => {
                let status = if matches!(answer, Err(ApiError::OrderCancelled { .. })) {
                    Status::Cancelled
                } else {
                    Status::Expired
                };
                let held = self.holding(buyer).await;
                promise!(
                    self,
                    held == Some((*order_id, status)),
                    "{} but MySQL has {held:?}",
                    show(&answer)
                );
                self.told_order.push((*order_id, buyer));
            }
            Err(ApiError::SoldOut | ApiError::Ended | ApiError::NotStarted) => {
                if decided == (true, self.disturbances) {
                    promise!(
                        self,
                        theirs.is_none(),
                        "{}, but MySQL holds order {theirs:?} of buyer {buyer}",
                        show(&answer)
                    );
                }
                if decided.0 && answer != Err(ApiError::NotStarted) {
                    self.told_final.push((buyer, decided.1));
                }
            }
            // Fewer units left than she asked for: nothing taken, and nothing final.
            Err(ApiError::Short { left }) => {
                let asked = u64::from(asked);
                promise!(
                    self,
                    (1..asked).contains(left) && (!decided.0 || theirs.is_none()),
                    "not_enough_left ({left} of the {asked} she asked for), MySQL holds \
                     order {theirs:?} of buyer {buyer}"
                );
            }
            // Her place in line: only a buyer who joined it has one.
            Err(ApiError::Waitlisted { position, .. }) => promise!(
                self,
                joined && *position >= 1,
                "buyer {buyer} hears she is at place {position} in line (joined: {joined})"
            ),
            Err(ApiError::NotInLine { .. }) => promise!(
                self,
                request.ask == LineAsk::Look,
                "a {:?} of buyer {buyer} answers not_in_line",
                request.ask
            ),
            Err(ApiError::Busy { .. } | ApiError::Throttled | ApiError::Unavailable(_)) => {}
            Err(other) => promise!(self, false, "a purchase answered {other:?}"),
        }
        self.answers.insert(id, answer);
        Ok(())
    }

    /// The promises that hold after every step.
    pub(super) async fn check(&mut self) -> Checked {
        self.deadlines_passed().await;
        // A unit given back may go to a buyer told sold_out before: from MySQL's stock,
        // and again once Redis applies it.
        let returned = (self.returns_after(0).await, self.returned_mark().await);
        if returned != self.returned {
            self.returned = returned;
            self.disturbances += 1;
        }
        let (stock, initial) = self.mysql_state().await;
        let voucher = self.sale.voucher.raw();
        let quantities: Vec<(u64, u64, u64, u64)> = self
            .query(
                "SELECT id, user_id, status, quantity FROM tb_voucher_order WHERE voucher_id = ?",
                (voucher,),
            )
            .await;
        // As `World::orders` reads them, from the same rows.
        let orders: Vec<(OrderId, u64, Status)> = quantities
            .iter()
            .map(|&(order, buyer, status, _)| {
                let status = Status::of(status).expect("a known status");
                (OrderId::from_raw(order), buyer, status)
            })
            .collect();
        let live: u64 = quantities
            .iter()
            .filter(|(.., status, _)| matches!(status, 1 | 2))
            .map(|(.., units)| units)
            .sum();
        promise!(
            self,
            live <= self.initial,
            "oversold: {live} units in live orders"
        );
        promise!(
            self,
            stock + live == self.initial && initial == self.initial,
            "MySQL stock {stock} + {live} units in live orders, of {initial} units, != {} \
             (the creation's and restocks {:?})",
            self.initial,
            self.restocks
        );
        self.check_initial(initial).await?;
        // Each order holds the units its buyer asked for in one press, within the sale's
        // limit: her quantity then, as it was after some number of Redis losses so far.
        for (order, buyer, _, units) in &quantities {
            let asked = |losses| u64::from(units_asked(*buyer, losses, self.per_buyer));
            promise!(
                self,
                (0..=self.losses).any(|losses| asked(losses) == *units) && *units <= self.per_buyer,
                "order {order} of buyer {buyer} holds {units} units"
            );
        }
        let mut per_buyer: HashMap<u64, OrderId> = HashMap::new();
        let mut statuses: HashMap<OrderId, Status> = HashMap::new();
        for (order, buyer, status) in &orders {
            promise!(
                self,
                per_buyer.insert(*buyer, *order).is_none(),
                "buyer {buyer} has two orders"
            );
            statuses.insert(*order, *status);
        }
        // Every 201 and every already_ordered stands, once a heal put back what MySQL lost.
        let lost: HashSet<OrderId> = self
            .lost_orders
            .iter()
            .copied()
            .filter(|order| !statuses.contains_key(order))
            .collect();
        let statuses_lack_lost = !lost.is_empty();
        // A lost order not back with its buyer: the heal puts it back, or names it lost
        // (its id taken meanwhile by another order after a `Collide`, say).
        let lost_orders = self.lost_orders.clone();
        let missing = |order: &OrderId, buyer: u64| {
            lost_orders.contains(order) && per_buyer.get(&buyer) != Some(order)
        };
        for (order, buyer) in &self.told_order {
            if missing(order, *buyer) {
                continue;
            }
            promise!(
                self,
                per_buyer.get(buyer) == Some(order),
                "buyer {buyer} was told of order {order}, MySQL has {:?}",
                per_buyer.get(buyer)
            );
        }
        // A payment or a cancellation told is for good.
        for (order, status) in &self.told_settled {
            promise!(
                self,
                statuses.get(order) == Some(status),
                "order {order} was told {status:?}, MySQL has {:?}",
                statuses.get(order)
            );
        }
        self.check_events(&statuses).await?;
        // A final 409 stays final while nothing disturbed the sale.
        for (buyer, disturbances) in &self.told_final {
            if *disturbances == self.disturbances {
                promise!(
                    self,
                    !per_buyer.contains_key(buyer),
                    "buyer {buyer} was told sold_out or ended, and now holds order {:?}",
                    per_buyer.get(buyer)
                );
            }
        }
        let records: HashMap<UserId, Record> = self.sale.records().await.into_iter().collect();
        // An order the heal named lost (`l:`) for want of a unit: only a Redis too generous
        // since a sync could have sold that unit first. Its buyer may buy again.
        if self.synced {
            for record in records.values() {
                if let Record::Lost(order) = record {
                    self.forgiven.insert(*order);
                }
            }
        }
        for (buyer, record) in &records {
            // Redis learns of a cancellation or an expiry after MySQL, and of nothing else
            // but orders.
            if record
                .order_id()
                .is_some_and(|order| missing(&order, buyer.raw()))
            {
                // An order MySQL lost: the heal puts it back, or names it lost.
                continue;
            }
            let expected = match record {
                Record::Queued(_) => continue,
                Record::Ordered(order, _) => statuses.get(order).map(|_| *order),
                Record::Cancelled(order) => {
                    (statuses.get(order) == Some(&Status::Cancelled)).then_some(*order)
                }
                Record::Expired(order) => {
                    (statuses.get(order) == Some(&Status::Expired)).then_some(*order)
                }
                // Its id may be another buyer's order now: one a Redis that lost its
                // sequence handed out again, which is why the heal could not take it.
                Record::Lost(order) => {
                    promise!(
                        self,
                        per_buyer.get(&buyer.raw()) != Some(order),
                        "Redis records buyer {buyer}'s order {order} lost, and MySQL holds it"
                    );
                    continue;
                }
            };
            promise!(
                self,
                expected.is_some() && per_buyer.get(&buyer.raw()) == expected.as_ref(),
                "Redis records buyer {buyer} as {record}, MySQL has {:?} ({:?})",
                per_buyer.get(&buyer.raw()),
                per_buyer
                    .get(&buyer.raw())
                    .and_then(|order| statuses.get(order))
            );
        }
        // The queue and the queued records agree: one entry per queued purchase, and an
        // entry whose record is not its own only once MySQL's order replaced it (a sync,
        // or a restock of that order cancelled or expired before its publication).
        let queue = self.sale.queue().await;
        let mut entries = HashSet::new();
        for entry in &queue {
            promise!(
                self,
                entries.insert(*entry),
                "{entry} queued twice: {queue:?}"
            );
            let record = records.get(&entry.user);
            promise!(
                self,
                record == Some(&Record::Queued(entry.ticket))
                    || record.is_some_and(|record| record.order_id().is_some()),
                "queue entry {entry}, yet its buyer's record is {record:?}"
            );
        }
        self.check_line(&queue, &per_buyer, &records).await?;
        let mut queued = 0;
        for (buyer, record) in &records {
            if let Record::Queued(ticket) = record {
                queued += i64::from(ticket.units());
                let entry = Entry {
                    user: *buyer,
                    ticket: *ticket,
                };
                promise!(
                    self,
                    entries.contains(&entry),
                    "buyer {buyer} is {record}, the queue is {queue:?}"
                );
            }
        }
        if self.loaded == Some(true) && !statuses_lack_lost {
            // Never too stingy: the units Redis can still hand out, those its queued
            // purchases hold, and those MySQL gave back that it has not applied yet cover
            // what MySQL has left.
            let redis_stock = self.sale.stock().await;
            let mark = self.returned_mark().await;
            let pending = self.returns_after(mark).await as i64;
            promise!(
                self,
                redis_stock.is_some_and(|s| s + queued + pending >= stock as i64),
                "Redis too stingy: stock {redis_stock:?} + {queued} queued + {pending} returns \
                 to apply < MySQL stock {stock}"
            );
        }
        Ok(())
    }

    /// Redis counts each restock in its initial stock once, those up to its
    /// "restocked_event": MySQL's initial stock is Redis's and the units of the restocks
    /// after that, whatever applied them (a give-back, again after a mark moved back, a
    /// sync, a snapshot restored).
    async fn check_initial(&mut self, mysql_initial: u64) -> Checked {
        if self.restocks.is_empty() {
            return Ok(());
        }
        let (stock, redis_initial, counted): (Option<i64>, Option<u64>, Option<u64>) = self
            .sale
            .conn
            .clone()
            .hget(
                self.sale.keys().voucher(),
                &["stock", "initial_stock", "restocked_event"],
            )
            .await
            .unwrap();
        if stock.is_none() {
            return Ok(());
        }
        let uncounted = self.restocks_after(counted.unwrap_or(0));
        promise!(
            self,
            redis_initial.map(|units| units + uncounted) == Some(mysql_initial),
            "Redis's initial stock {redis_initial:?} (restocks counted to event {counted:?}) \
             and {uncounted} units restocked after != MySQL's {mysql_initial}"
        );
        Ok(())
    }

    /// The sale's mark before a restock.lua (`command`) that is handed restocks: which of
    /// them it applies shows after it ([`World::restocks_applied`]).
    pub(super) async fn restocks_before(&self, command: Option<&Command>) -> Option<Watch> {
        let Command::Script { args, .. } = command? else {
            return None;
        };
        let events: Vec<serde_json::Value> =
            serde_json::from_str(&args.get("events")?.to_string()).ok()?;
        let restocks: Vec<u64> = events
            .iter()
            .filter(|event| event["kind"] == "r")
            .filter_map(|event| event["event"].as_str()?.parse().ok())
            .collect();
        (!restocks.is_empty()).then_some(Watch {
            restocks,
            mark: self.returned_mark().await,
        })
    }

    /// The restocks the restock.lua `watch`ed applied (the mark passed them): each one's
    /// first application, or again on the Redis that applied it (a sold-out publication
    /// or an audit moved the mark back), or again after a rollback took it back.
    pub(super) async fn restocks_applied(&mut self, watch: Option<Watch>) {
        let Some(Watch { restocks, mark }) = watch else {
            return;
        };
        let after = self.returned_mark().await;
        for event in restocks.into_iter().filter(|&e| mark < e && e <= after) {
            let now = (self.losses, self.rollbacks);
            match self.applied.insert(event, now) {
                Some((_, rollbacks)) if rollbacks < now.1 => {
                    self.restocked_again.1 = true;
                    self.log
                        .push(format!("restock {event} applied again after a rollback"));
                }
                Some(_) => {
                    self.restocked_again.0 = true;
                    self.log.push(format!("restock {event} applied again"));
                }
                None => {}
            }
        }
    }

    /// The sale's line: the purchases its hand-outs queued are admitted ones; a buyer
    /// who left it is out of it and handed nothing more; and, while Redis lost nothing,
    /// nobody in it holds a purchase or an order (a hand-out takes such buyers out).
    async fn check_line(
        &mut self,
        queue: &[Entry],
        per_buyer: &HashMap<u64, OrderId>,
        records: &HashMap<UserId, Record>,
    ) -> Checked {
        for entry in queue {
            if !self.admitted.contains(entry) {
                self.admitted.push(*entry);
                let ticket = entry.ticket;
                if !self.tickets.insert((ticket.seconds(), ticket.sequence())) {
                    self.disturbances += 1;
                    self.log
                        .push(format!("the line handed ticket {ticket} out again"));
                }
            }
        }
        let members = self.sale.line_members().await;
        let left: Vec<(u64, (u64, bool))> = self.left.iter().map(|(b, at)| (*b, *at)).collect();
        for (buyer, (losses, handed)) in left {
            if losses != self.losses {
                continue;
            }
            let unheard = self.handed_unheard(buyer).await;
            promise!(
                self,
                !members.iter().any(|&(member, ..)| member == buyer) && (handed || !unheard),
                "buyer {buyer} left the line; she is in it, or it handed her units: {members:?}"
            );
        }
        if self.losses == 0 {
            for &(buyer, place, units) in &members {
                let record = records.get(&user(buyer));
                let holds = record.is_some_and(|r| matches!(r, Record::Queued(_)))
                    || record.is_some_and(|r| r.order_id().is_some())
                    || per_buyer.contains_key(&buyer);
                promise!(
                    self,
                    !holds,
                    "buyer {buyer} waits in line (place {place}, {units} units) holding \
                     {record:?}, MySQL order {:?}",
                    per_buyer.get(&buyer)
                );
            }
        }
        Ok(())
    }

    /// Whether units left in Redis wait for the first in line, who asks for more.
    async fn units_wait_for_line(&self) -> bool {
        let members = self.sale.line_members().await;
        let stock = self.sale.stock().await.unwrap_or(0);
        members
            .first()
            .is_some_and(|&(_, _, units)| i64::from(units) > stock)
    }

    /// The line hands out all it may: everyone in it looks, and every buyer it handed
    /// units presses (her request commits her purchase), until a round hands nothing.
    /// Then, while the sale lasts, nobody waits beside units she fits: the line is empty,
    /// or the first in it asks for more than Redis holds (the units wait for her), and
    /// nobody in it holds an order.
    async fn settle_line(&mut self) -> Checked {
        for _ in 0..=self.buyers {
            let handed = self.sale.line_handed().await;
            let members = self.sale.line_members().await;
            for (buyer, ..) in members {
                self.quiet_ask(buyer, LineAsk::Look).await?;
                self.settle_all().await?;
            }
            for buyer in 1..=self.buyers {
                let queued = matches!(self.sale.record(user(buyer)).await, Some(Record::Queued(_)));
                if queued || self.handed_unheard(buyer).await {
                    let _heard = self.press_until_final(buyer).await?;
                }
            }
            if self.sale.line_handed().await == handed {
                break;
            }
        }
        if self.phase_now().await == Phase::Ended {
            return Ok(());
        }
        let members = self.sale.line_members().await;
        let stock = self.sale.stock().await;
        if !members.is_empty() && stock.is_some_and(|stock| stock > 0) {
            UNITS_WAITING.fetch_add(1, Ordering::Relaxed);
        }
        promise!(
            self,
            members.is_empty() || self.units_wait_for_line().await,
            "the line settled, yet {members:?} wait beside {stock:?} units"
        );
        Ok(())
    }

    /// A buyer presses until she gets a final answer (`busy` and `503` are retried, after
    /// the lease a dead waiter was handed lapsed), which must be MySQL's word for her.
    async fn press_until_final(&mut self, buyer: u64) -> Result<Answer, TestCaseError> {
        let had = self.order_of(buyer).await;
        let mut answer = Err(ApiError::Unavailable(Unavailable::Redis));
        // MySQL's stock, the purchases queued ahead of her and the units MySQL gave back
        // that Redis has not applied yet, when admission decided.
        let mut decided = (0, 0, 0);
        let (mut handed, mut waiting) = (0, false);
        for _ in 0..self.buyers + self.initial + 8 {
            let mark = self.returned_mark().await;
            // Units of orders MySQL lost are its own until a heal puts the orders back.
            let lost: u64 = self
                .lost_orders_missing()
                .await
                .iter()
                .map(|order| self.units_of_order(*order))
                .sum();
            decided = (
                self.mysql_state().await.0.saturating_sub(lost),
                self.queued().await,
                self.returns_after(mark).await,
            );
            let handed_before = self.sale.line_handed().await;
            waiting = self.units_wait_for_line().await;
            let id = self.quiet_press(buyer).await?;
            self.check().await?;
            self.settle_all().await?;
            // Units her request's hand-outs gave the line (its admission's, and another's
            // after its sweep gave units back), before her admission.
            handed = (self.sale.line_handed().await - handed_before).max(0) as u64;
            answer = self.answers[&id].clone();
            match answer {
                Err(ApiError::Busy { .. }) => {
                    self.sale.expire_lease().await;
                    self.log.push("the drainer's lease lapses".into());
                }
                Err(ApiError::Unavailable(_) | ApiError::Throttled) => {}
                _ => break,
            }
        }
        match (had, &answer) {
            (Some(order), Ok(Receipt { order_id, .. }))
            | (Some(order), Err(ApiError::AlreadyOrdered { order_id }))
            | (Some(order), Err(ApiError::OrderCancelled { order_id }))
            | (Some(order), Err(ApiError::OrderExpired { order_id })) => promise!(
                self,
                *order_id == order,
                "buyer {buyer} has order {order} in MySQL but hears {}",
                show(&answer)
            ),
            // Her queued purchase committed by this press: `answer` saw it hers.
            (None, Ok(_) | Err(ApiError::AlreadyOrdered { .. })) => {}
            // Every unit MySQL had left was held by a purchase queued ahead of her (which
            // may still give it back, its order id taken), or given back by a cancellation
            // whose restock failed: Redis applies it at the sale's next sweep, by that
            // order's deadline at the latest.
            // Fewer than she asked for left beside them: how many Redis had.
            // Or the units left wait for the first in line, who asks for more (her place
            // in line is her answer too).
            (
                None,
                Err(ApiError::SoldOut | ApiError::Short { .. } | ApiError::Waitlisted { .. }),
            ) => {
                let (stock, queued, pending) = decided;
                let left = match answer {
                    Err(ApiError::Short { left }) => left,
                    _ => 0,
                };
                let waiting = waiting || self.units_wait_for_line().await;
                promise!(
                    self,
                    stock <= queued + pending + left + handed || waiting,
                    "buyer {buyer} hears {} while MySQL has {stock} units for {queued} \
                     queued, {pending} returns Redis has not applied, {handed} handed to the \
                     line and {left} left",
                    show(&answer)
                );
            }
            (None, Err(ApiError::Ended)) => {}
            _ => promise!(self, false, "buyer {buyer} ends with {}", show(&answer)),
        }
        Ok(answer)
    }

    /// The sale goes quiet: every live request runs to its end, leases lapse, the admin
    /// syncs after a loss, a sale not yet begun begins; then every buyer presses until
    /// she is answered for good, then (while the sale is live) new buyers until MySQL is
    /// sold out, and everyone hears what MySQL holds for her, during the sale and after
    /// its end.
    pub(super) async fn quiesce(&mut self) -> Checked {
        self.log
            .push("-- quiet: every request in flight runs to its end".into());
        self.syncs.clear();
        self.sale.expire_sync_lease().await;
        // Time passes: a sale not begun begins, one ending soon ends.
        match self.phase_now().await {
            Phase::NotStarted => self.set_window(Phase::Live).await,
            Phase::EndingSoon => self.set_window(Phase::Ended).await,
            Phase::Live | Phase::Ended => {}
        }
        self.settle_all().await?;
        while !self.give_backs.is_empty() {
            self.give_back(0, None).await?;
            self.check().await?;
        }
        self.log.push("-- every lease lapses".into());
        self.sale.expire_lease().await;
        if !self.recovered || self.loaded != Some(true) {
            self.sync().await?;
            promise!(
                self,
                self.recovered && self.loaded == Some(true),
                "the admin's sync did not load the voucher"
            );
        }
        // With no scheduler: the presses that follow a deadline expire what it passed,
        // and give back every unit MySQL gave back.
        self.pass_deadlines().await;
        self.log.push("-- every buyer presses".into());
        for buyer in 1..=self.buyers {
            let _final = self.press_until_final(buyer).await?;
        }
        // An order committed after time passed its deadline is overdue from then on: the
        // next press sweeps it.
        let _again = self.press_until_final(1).await?;
        if !self.lost_orders_missing().await.is_empty() {
            // The sale's next sweep (a press's or a page read's, once a second) audits
            // MySQL and heals what it lost.
            let (run, io) = Returns::with_page(self.sale.voucher, true, GIVE_BACK_PAGE);
            self.start_give_back("a sweep that audits MySQL".into(), run, io);
            while !self.give_backs.is_empty() {
                self.give_back(0, None).await?;
                self.check().await?;
            }
            let gone: Vec<OrderId> = self
                .lost_orders_missing()
                .await
                .into_iter()
                .filter(|order| !self.forgiven.contains(order))
                .collect();
            promise!(
                self,
                gone.is_empty(),
                "a sweep ran, and MySQL still lacks orders {gone:?} it lost"
            );
        }
        // Units back (the heal's, the presses' sweeps') go to the line first.
        self.settle_line().await?;
        let overdue: u64 = self
            .query(
                "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status = 1 \
                 AND expire_time <= UTC_TIMESTAMP()",
                (self.sale.voucher.raw(),),
            )
            .await[0];
        promise!(
            self,
            overdue == 0,
            "{overdue} unpaid orders past their deadline after the presses that followed it"
        );
        // Every admitted buyer ends with an order or her unit back.
        let (stock, _) = self.mysql_state().await;
        let redis_stock = self.sale.stock().await;
        let queue = self.sale.queue().await;
        let queued: Vec<(UserId, Record)> = self
            .sale
            .records()
            .await
            .into_iter()
            .filter(|(_, record)| matches!(record, Record::Queued(_)))
            .collect();
        promise!(
            self,
            queue.is_empty() && queued.is_empty(),
            "every buyer answered, yet queued {queue:?}, records {queued:?}"
        );
        let agrees = match redis_stock {
            Some(s) if self.synced => s >= stock as i64,
            Some(s) => s == stock as i64,
            None => false,
        };
        promise!(
            self,
            agrees,
            "quiet, yet Redis stock {redis_stock:?} vs MySQL {stock} (synced: {})",
            self.synced
        );
        // Every restock reached Redis's initial stock, once.
        let (_, initial) = self.mysql_state().await;
        let redis_initial: Option<u64> = self.sale.voucher_get("initial_stock").await;
        promise!(
            self,
            redis_initial == Some(initial),
            "quiet, yet Redis's initial stock {redis_initial:?} vs MySQL's {initial} \
             (restocks {:?})",
            self.restocks
        );
        let mut newcomers = Vec::new();
        if self.phase_now().await != Phase::Ended {
            // New buyers until one hears sold_out: the sale is then sold out.
            for buyer in 100..100 + 2 * self.initial + 4 {
                newcomers.push(buyer);
                match self.press_until_final(buyer).await? {
                    Err(ApiError::SoldOut) => break,
                    Err(ApiError::Ended) => break,
                    _ => {}
                }
            }
            if self.phase_now().await != Phase::Ended {
                let (stock, _) = self.mysql_state().await;
                let waiting = self.units_wait_for_line().await;
                promise!(
                    self,
                    stock == 0 || waiting,
                    "new buyers left {stock} units in MySQL, nobody in line waiting for them"
                );
            }
        }
        for phase in [None, Some(Phase::Ended)] {
            if let Some(phase) = phase {
                self.set_window(phase).await;
            }
            let phase = self.phase_now().await;
            self.log
                .push(format!("-- everyone presses once more ({phase:?})"));
            for buyer in (1..=self.buyers).chain(newcomers.iter().copied()) {
                let had = self.holding(buyer).await;
                let in_line = self.in_line(buyer).await;
                let unheard = self.handed_unheard(buyer).await;
                let id = self.quiet_press(buyer).await?;
                self.settle_all().await?;
                let answer = self.answers[&id].clone();
                // One in line hears her place, while the sale lasts.
                let placed = in_line
                    && phase != Phase::Ended
                    && matches!(answer, Err(ApiError::Waitlisted { .. }));
                // One the line handed units hears her order as her purchase's 201, on her
                // first press since.
                let won = unheard
                    && matches!((&answer, had), (Ok(Receipt { order_id, .. }), Some((order, _)))
                        if *order_id == order);
                let expected = match had {
                    Some((order_id, Status::Cancelled)) => {
                        Err(ApiError::OrderCancelled { order_id })
                    }
                    Some((order_id, Status::Expired)) => Err(ApiError::OrderExpired { order_id }),
                    Some((order_id, _)) => Err(ApiError::AlreadyOrdered { order_id }),
                    None if phase == Phase::Ended => Err(ApiError::Ended),
                    None => Err(ApiError::SoldOut),
                };
                // An order lost for good (see `forgiven`) may still be named to its buyer:
                // nothing tells the product it is gone.
                let forgiven = matches!(&answer, Err(ApiError::AlreadyOrdered { order_id })
                    if self.forgiven.contains(order_id));
                promise!(
                    self,
                    answer == expected || forgiven || placed || won,
                    "buyer {buyer} hears {}, MySQL stands for {}",
                    show(&answer),
                    show(&expected)
                );
            }
        }
        let queue = self.sale.queue().await;
        promise!(self, queue.is_empty(), "quiet, yet the queue is {queue:?}");
        Ok(())
    }

    /// The order feed of the voucher agrees with its orders: each order created once,
    /// changed at most once, into the status it has now; nothing else.
    async fn check_events(&mut self, statuses: &HashMap<OrderId, Status>) -> Checked {
        let voucher = self.sale.voucher.raw();
        let events: Vec<(u64, u8, u64, u64)> = self
            .query(
                "SELECT order_id, type, user_id, COALESCE(units, 0) FROM tb_order_event \
                 WHERE voucher_id = ? ORDER BY id",
                (voucher,),
            )
            .await;
        let mut seen: HashMap<OrderId, Vec<u8>> = HashMap::new();
        // The sale's own: each restock a sale.restocked of its units (the sale's one
        // bucket takes them all) and a sale.changed, of no order and no buyer.
        let (mut restocked, mut changes) = (Vec::new(), 0);
        for (order, kind, buyer, units) in events {
            match kind {
                5 | 6 if order == 0 && buyer == 0 => {
                    if kind == 5 {
                        restocked.push(units);
                    } else {
                        changes += 1;
                    }
                }
                _ => seen.entry(OrderId::from_raw(order)).or_default().push(kind),
            }
        }
        promise!(
            self,
            restocked == self.restocks && changes == self.restocks.len(),
            "restocks {:?}, yet MySQL's sale.restocked events {restocked:?} and {changes} \
             sale.changed",
            self.restocks
        );
        for (order, status) in statuses {
            let kinds = seen.remove(order).unwrap_or_default();
            let expected: &[u8] = match status {
                Status::Unpaid => &[1],
                Status::Paid => &[1, 2],
                Status::Cancelled => &[1, 3],
                Status::Expired => &[1, 4],
                other => {
                    promise!(self, false, "order {order} is {other:?}");
                    &[]
                }
            };
            promise!(
                self,
                kinds == expected,
                "order {order} is {status:?}, its events are {kinds:?}"
            );
        }
        promise!(self, seen.is_empty(), "events of no order: {seen:?}");
        Ok(())
    }
}

/// The outcomes a publication records, in its batch's order (`lua/publish.lua`'s last
/// argument, the entries published).
/// A publication's entries, each with MySQL's verdict told (publish.lua's `published`),
/// and the units MySQL had left once the batch committed (its `mysql_stock`; `None` when
/// nothing was committed).
pub(super) fn publication_outcomes(io: &Io) -> Option<(Vec<Outcome>, Option<i64>)> {
    match io {
        Io::Redis(Command::Script { script, args, .. }) if script.name == "publish" => {
            let batch: Vec<PublishedEntry> =
                serde_json::from_str(&args.get("published")?.to_string()).ok()?;
            let mysql_left = args.get("mysql_stock")?.to_string().parse().ok();
            let outcomes = batch
                .into_iter()
                .map(|published| Outcome {
                    entry: published.entry,
                    outcome: published.told.outcome,
                    units: published.told.units,
                })
                .collect();
            Some((outcomes, mysql_left))
        }
        _ => None,
    }
}

/// The restock.lua a give-back runs next, if it does.
pub(super) fn restock_command(io: &returns::Io) -> Option<&Command> {
    match io {
        returns::Io::Redis(command @ Command::Script { script, .. })
            if script.name == "restock" =>
        {
            Some(command)
        }
        _ => None,
    }
}

/// The restock.lua a purchase's sweep runs next, if it does.
pub(super) fn swept_restock(io: &Io) -> Option<&Command> {
    match io {
        Io::Sweep(step) => restock_command(step),
        _ => None,
    }
}

/// Restocks handed to a restock.lua, and the sale's mark before it ran.
pub(super) struct Watch {
    restocks: Vec<u64>,
    mark: u64,
}

/// One entry of a publication and MySQL's verdict on it.
pub(super) struct Outcome {
    entry: String,
    pub(super) outcome: String,
    /// The units of the order the verdict is about.
    units: u32,
}

pub(super) fn show(answer: &Answer) -> String {
    match answer {
        Ok(receipt) => format!("201 {}", receipt.order_id),
        Err(ApiError::AlreadyOrdered { order_id }) => format!("409 already_ordered {order_id}"),
        Err(error) => format!("{} {}", error.status(), error.code()),
    }
}

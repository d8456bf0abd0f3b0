use std::sync::atomic::Ordering;

use redis::AsyncCommands;

use seckill_core::purchase::Receipt;
use seckill_core::sale::{EndSale, LineAsk, MYSQL_BEHIND};
use seckill_core::{ApiError, UserId};
use seckill_tests::promise;

use super::moves::Step;
use super::world::{Bucket, Checked, Request, World};
use super::{
    BUYERS, DEAD_ELSEWHERE, HAND_OUTS_FULL, LATE_BUYERS, LOOKS_ORDERED, PASSED_OVER, SHORT,
    UNMARKED,
};

impl World {
    pub(super) async fn answered(
        &mut self,
        request: &Request,
        answer: Result<Receipt, ApiError>,
    ) -> Checked {
        self.log.push(format!("#{} answers {answer:?}", request.id));
        // A look answers an order only to a buyer who held a purchase when it was made, or
        // made a press or a join (which may run its admission before the look's): it never
        // takes units for her.
        if matches!(answer, Ok(_) | Err(ApiError::AlreadyOrdered { .. })) {
            promise!(
                self,
                request.ask != LineAsk::Look
                    || request.had
                    || self.pressed.contains(&request.buyer),
                "a look of buyer {}, who had not pressed nor joined, answers {answer:?}",
                request.buyer
            );
        }
        if request.ask == LineAsk::Look && answer.is_ok() {
            LOOKS_ORDERED.fetch_add(1, Ordering::Relaxed);
        }
        // The line hands a buyer the units she asked for when she entered it, which a
        // press of hers answers too: she may ask for fewer since (told fewer were left),
        // and units given back or restocked fit her place.
        let line_units = request.ask != LineAsk::Press;
        let entered = self
            .draw
            .as_ref()
            .and_then(|draw| draw.places.get(&request.buyer));
        let entered = entered.map(|&(_, units)| units);
        match answer {
            Ok(receipt) => {
                promise!(
                    self,
                    receipt.voucher_id == self.sale()
                        && receipt.user_id.raw() == request.buyer
                        && (receipt.quantity == request.units
                            || entered == Some(receipt.quantity)
                            || line_units && u64::from(receipt.quantity) <= self.per_buyer),
                    "a receipt names another voucher, buyer or quantity: {receipt:?}"
                );
                if let Some(draw) = &self.draw {
                    let now = self.sales[0].now_ms().await;
                    promise!(self, now >= draw.at_ms, "a 201 before the draw");
                }
                self.told_order.push((receipt.order_id, request.buyer));
            }
            Err(ApiError::AlreadyOrdered { order_id }) => {
                let dead = self.dead.get(&order_id);
                promise!(
                    self,
                    dead.is_none_or(|&at| at > request.pressed)
                        || request.stale_elsewhere == Some(order_id),
                    "buyer {} heard already_ordered for order {order_id}, cancelled before \
                     she pressed",
                    request.buyer
                );
                self.told_order.push((order_id, request.buyer))
            }
            Err(ApiError::OrderCancelled { order_id } | ApiError::OrderExpired { order_id }) => {
                if self.bucket_of(order_id).await != Some(request.flight.purchase.bucket()) {
                    DEAD_ELSEWHERE.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Fewer left than she asked for, in the bucket with most: she asks for that many
            // next.
            Err(ApiError::Short { left }) => {
                promise!(
                    self,
                    (1..u64::from(request.units)).contains(&left),
                    "buyer {} asked for {} units and heard {left} were left",
                    request.buyer,
                    request.units
                );
                self.asking.insert(request.buyer, left as u32);
                SHORT.fetch_add(1, Ordering::Relaxed);
            }
            Err(error @ (ApiError::SoldOut | ApiError::Ended)) => {
                // Unless a unit came back meanwhile, for another press of hers to take.
                let held = self.held_by(request.buyer).await;
                promise!(
                    self,
                    held.is_none() || self.came_back > request.came_back,
                    "buyer {} heard {} while {held:?} holds her purchase",
                    request.buyer,
                    error.code()
                );
                if error != ApiError::SoldOut {
                    return Ok(());
                }
                let stock = self.redis_stock().await;
                let home = self.buckets.ring(UserId::from_raw(request.buyer))[0];
                let home = self.sales.iter().find(|sale| sale.voucher == home);
                let marked = home.expect("her bucket").all_out().await;
                // Units left wait for the buyers in line, when any do.
                let in_line = self.in_line().await;
                promise!(
                    self,
                    stock == 0 || marked || in_line > 0 || self.came_back > request.came_back,
                    "buyer {} heard sold_out with {stock} units in the buckets, her bucket \
                     unmarked, nobody in line and no unit back since she pressed",
                    request.buyer
                );
            }
            // A sale in buckets has no line; a draw's is the sale's.
            Err(ApiError::NoLine) => promise!(
                self,
                self.draw.is_none() && line_units,
                "buyer {}'s {:?} heard the sale has no line",
                request.buyer,
                request.ask
            ),
            Err(_) => {}
        }
        Ok(())
    }

    /// A buyer who left the line is out of it, and handed nothing more.
    async fn check_left(&mut self) -> Checked {
        let sale = &self.sales[0];
        let members = sale.line_members().await;
        let mut handed = Vec::new();
        for (&buyer, &before) in &self.left {
            let unheard = sale.handed_unheard(UserId::from_raw(buyer)).await;
            let in_line = members.iter().any(|&(member, ..)| member == buyer);
            if in_line || unheard && !before {
                handed.push(buyer);
            }
        }
        promise!(
            self,
            handed.is_empty(),
            "buyers {handed:?} left the line: they are in it again, or were handed units \
             ({members:?})"
        );
        Ok(())
    }

    pub(super) async fn check(&mut self) -> Checked {
        let buckets = self.mysql_buckets().await;
        let live: u64 = buckets.iter().map(|b| b.live).sum();
        promise!(
            self,
            live <= self.stock,
            "{live} units in live orders for {} units",
            self.stock
        );
        for (bucket, sale) in buckets.iter().zip(&self.sales) {
            promise!(
                self,
                bucket.stock + bucket.live == bucket.initial,
                "bucket {}: MySQL's stock {} and {} units in live orders of {} units",
                bucket.id,
                bucket.stock,
                bucket.live,
                bucket.initial
            );
            let redis = sale.stock().await;
            promise!(
                self,
                redis.is_some_and(|redis| 0 <= redis && redis <= bucket.stock as i64),
                "bucket {}: Redis stock {redis:?} against MySQL's {}",
                bucket.id,
                bucket.stock
            );
        }
        let initial: u64 = buckets.iter().map(|b| b.initial).sum();
        promise!(
            self,
            initial == self.stock,
            "the buckets hold {initial} units, the creation's and restocks {:?} {}",
            self.restocks,
            self.stock
        );
        if live > self.created.iter().sum() {
            self.restock_reached.0 = true;
        }
        self.check_restocks(&buckets).await?;
        let orders = self.orders().await;
        let mut buyers: Vec<u64> = orders.iter().map(|o| o.1).collect();
        buyers.sort_unstable();
        buyers.dedup();
        promise!(
            self,
            buyers.len() == orders.len(),
            "a buyer holds two orders: {orders:?}"
        );
        for &(order, buyer) in &self.told_order {
            let lost = self.lost.iter().any(|l| l.0 == order);
            promise!(
                self,
                lost || orders.iter().any(|o| o.0 == order.raw() && o.1 == buyer),
                "order {order} of buyer {buyer} was told and is not in MySQL: {orders:?}"
            );
        }
        let mut marks = Vec::new();
        for (n, sale) in self.sales.iter().enumerate() {
            let (marked, stock) = (sale.all_out().await, sale.stock().await.unwrap_or(0));
            promise!(
                self,
                !marked || stock <= 0,
                "bucket {} is marked all-out with {stock} units",
                sale.voucher
            );
            if self
                .marks
                .get(n)
                .is_some_and(|&(was, before)| was && stock > before)
            {
                UNMARKED.fetch_add(1, Ordering::Relaxed);
            }
            marks.push((marked, stock));
        }
        self.marks = marks;
        let stock = self.redis_stock().await;
        if stock > self.last_stock {
            self.came_back += 1;
        }
        self.last_stock = stock;
        if self.draw.is_some() {
            self.check_draw(&orders, stock).await?;
        }
        self.check_left().await
    }

    /// Each restock is spread as MySQL spreads units (each bucket its share, the first
    /// ones one more), a sale.restocked of its share for each bucket that got units and a
    /// sale.changed of the sale; and each bucket's Redis counts each restock in its
    /// initial stock once, those up to its "restocked_event": MySQL's initial stock is
    /// Redis's and the units restocked after that.
    async fn check_restocks(&mut self, buckets: &[Bucket]) -> Checked {
        let events = self.sale_events.clone();
        let changes = events
            .iter()
            .filter(|e| e.2 == 6 && e.1 == self.sale().raw());
        promise!(
            self,
            changes.count() == self.restocks.len(),
            "restocks {:?}, MySQL's events of the sale {events:?}",
            self.restocks
        );
        let k = buckets.len() as u64;
        for (i, bucket) in buckets.iter().enumerate() {
            let shares: Vec<u64> = self
                .restocks
                .iter()
                .map(|&units| units / k + u64::from((i as u64) < units % k))
                .filter(|&share| share > 0)
                .collect();
            let theirs: Vec<(u64, u64)> = events
                .iter()
                .filter(|e| e.2 == 5 && e.1 == bucket.id)
                .map(|e| (e.0, e.3))
                .collect();
            let units: Vec<u64> = theirs.iter().map(|e| e.1).collect();
            promise!(
                self,
                units == shares && bucket.initial == self.created[i] + shares.iter().sum::<u64>(),
                "bucket {}: restocks {:?} gave it {units:?} ({} units of {} created), not \
                 {shares:?}",
                bucket.id,
                self.restocks,
                bucket.initial,
                self.created[i]
            );
            let sale = &self.sales[i];
            let redis_initial = sale.voucher_field("initial_stock").await;
            let counted = sale.voucher_field("restocked_event").await.unwrap_or(0) as u64;
            let uncounted: u64 = theirs.iter().filter(|e| e.0 > counted).map(|e| e.1).sum();
            promise!(
                self,
                redis_initial.map(|units| units as u64 + uncounted) == Some(bucket.initial),
                "bucket {}: Redis's initial stock {redis_initial:?} (restocks counted to \
                 event {counted}) and {uncounted} units restocked after != MySQL's {}",
                bucket.id,
                bucket.initial
            );
        }
        Ok(())
    }

    /// Before the draw nobody holds a unit; after it, each hand-out (this step's: the
    /// entrants who left the line since the last check, `stock` units left after it) goes
    /// in place order among those who fit: every entrant still in line ahead of one
    /// handed units asked for more than were left when it passed her (the units left now
    /// and those handed behind her), and a hand-out short of its limit left nobody in line
    /// who fits what is left, unless the first in line asks for more: the units then wait
    /// for her (docs/design.md, "The line").
    async fn check_draw(&mut self, orders: &[(u64, u64, u64, u8)], stock: i64) -> Checked {
        let sale = &self.sales[0];
        let mut conn = sale.conn.clone();
        let mut line = Vec::new();
        for units in 1..=self.per_buyer as u32 {
            let entrants: Vec<(u64, u64)> = conn
                .zrange_withscores(sale.keys().line(units), 0, -1)
                .await
                .unwrap();
            for (buyer, place) in entrants {
                line.push(buyer);
                let draw = self.draw.as_mut().expect("a draw");
                draw.places.entry(buyer).or_insert((place, units));
            }
        }
        let now = sale.now_ms().await;
        let (handed_out, records) = (sale.queue().await.len(), sale.records().await.len());
        let draw = self.draw.as_ref().expect("a draw");
        if now < draw.at_ms {
            promise!(
                self,
                handed_out == 0 && records == 0 && orders.is_empty(),
                "a unit handed out before the draw: {handed_out} queued, {records} records"
            );
        }
        let mut handed: Vec<(u64, u32)> = Vec::new();
        for buyer in draw.line.iter().filter(|buyer| !line.contains(buyer)) {
            let holds = orders.iter().any(|o| o.1 == *buyer)
                || sale.record(UserId::from_raw(*buyer)).await.is_some();
            promise!(self, holds, "entrant {buyer} left the line with nothing");
            handed.push(draw.places[buyer]);
        }
        let waiting: Vec<(u64, u32)> = line.iter().map(|b| draw.places[b]).collect();
        let passed_over = waiting.iter().find(|&&(place, units)| {
            let behind: Vec<u32> = handed.iter().filter(|h| h.0 > place).map(|h| h.1).collect();
            let left = stock + behind.iter().map(|&u| i64::from(u)).sum::<i64>();
            !behind.is_empty() && i64::from(units) <= left
        });
        promise!(
            self,
            passed_over.is_none(),
            "a place that fit was passed over: handed out {handed:?}, {stock} left, still in \
             line {waiting:?}"
        );
        let hand_out = self.limits.draw_batch;
        let short_of_limit = !handed.is_empty() && (handed.len() as i64) < hand_out;
        let fits = waiting.iter().find(|w| i64::from(w.1) <= stock);
        let first_asks_more = waiting
            .iter()
            .min_by_key(|w| w.0)
            .is_some_and(|w| i64::from(w.1) > stock);
        promise!(
            self,
            !short_of_limit || fits.is_none() || first_asks_more,
            "a hand-out of {handed:?} stopped short with {stock} left for {fits:?}"
        );
        if handed.len() as i64 == hand_out && fits.is_some() {
            HAND_OUTS_FULL.fetch_add(1, Ordering::Relaxed);
        }
        if waiting
            .iter()
            .any(|&(place, _)| handed.iter().any(|h| h.0 > place))
        {
            PASSED_OVER.fetch_add(1, Ordering::Relaxed);
        }
        self.draw.as_mut().expect("a draw").line = line;
        Ok(())
    }

    /// Every request runs to its answer; then every buyer without an order presses until
    /// she holds one or hears `sold_out` from a sale nothing disturbs; then a late buyer of
    /// each bucket presses, whose admission takes over a queue a dead drainer left.
    pub(super) async fn settle(&mut self) -> Checked {
        if let Some(draw) = &self.draw {
            let left = draw.at_ms - self.sales[0].now_ms().await;
            if left > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(left as u64 + 5)).await;
            }
        }
        self.log
            .push("quiet: every request runs to its answer".into());
        while !self.give_backs.is_empty() {
            self.play(&Step::GiveBack { n: 0, lost: false }).await?;
        }
        for round in 0..=BUYERS {
            self.run_all().await?;
            self.sweep_all().await?;
            let held: Vec<u64> = self.orders().await.iter().map(|o| o.1).collect();
            let pressing: Vec<u64> = (1..=BUYERS).filter(|b| !held.contains(b)).collect();
            let live: u64 = self.mysql_buckets().await.iter().map(|b| b.live).sum();
            if pressing.is_empty()
                || live == self.stock
                || self.waiting_for_more(&pressing, live).await
            {
                break;
            }
            promise!(
                self,
                round < BUYERS,
                "units left ({live} units in live orders of {}) and buyers {pressing:?} without one",
                self.stock
            );
            self.a_while_later().await;
            for buyer in pressing {
                self.play(&Step::Press { buyer, knows: true }).await?;
            }
        }
        self.a_while_later().await;
        let buckets = self.sales.len() as u64;
        for late in LATE_BUYERS..LATE_BUYERS + buckets {
            self.play(&Step::Press {
                buyer: late,
                knows: true,
            })
            .await?;
        }
        self.run_all().await?;
        // Every buyer presses again while the late buyers' marks stand, then once the sale
        // has ended: one whose purchase a bucket holds (a walk's, say) hears of it.
        for ended in [false, true] {
            if ended {
                for sale in &self.sales {
                    sale.call(&EndSale {
                        voucher_id: sale.voucher,
                    })
                    .await
                    .unwrap();
                }
                self.log.push("the sale ends".into());
            }
            for buyer in 1..=BUYERS {
                self.play(&Step::Press {
                    buyer,
                    knows: !ended,
                })
                .await?;
            }
            self.run_all().await?;
        }
        self.agree().await
    }

    /// Whether every buyer `pressing` is an entrant of the draw still in line (at the last
    /// check) for more units than are left (`live` of them sold): the first press of hers
    /// in the window set her units, and she waits for units given back.
    async fn waiting_for_more(&self, pressing: &[u64], live: u64) -> bool {
        let Some(draw) = &self.draw else {
            return false;
        };
        // The units left wait for the first in line, who asks for more.
        let first = draw
            .line
            .iter()
            .filter_map(|b| draw.places.get(b))
            .min_by_key(|p| p.0);
        if first.is_some_and(|&(_, units)| u64::from(units) > self.stock - live) {
            return true;
        }
        for buyer in pressing {
            let in_line = draw.line.contains(buyer);
            let units = in_line.then(|| u64::from(draw.places[buyer].1));
            if units.is_none_or(|units| units <= self.stock - live) {
                return false;
            }
        }
        !draw.places.is_empty()
    }

    /// Quiet and audited, every bucket's Redis holds MySQL's stock and nothing queued, and
    /// none is behind MySQL; every order told that MySQL lost is back, or yielded to
    /// another order of the buyer's, or is named lost (she may buy again).
    async fn agree(&mut self) -> Checked {
        self.sweep_all().await?;
        let events = self.read_sale_events().await;
        promise!(
            self,
            events == self.sale_events,
            "the sale's events {events:?}, after restocks whose were {:?}",
            self.sale_events
        );
        let orders = self.orders().await;
        for &(order, buyer, bucket) in &self.lost {
            let told = self.told_order.iter().any(|t| t.0 == order);
            let back = orders.iter().any(|o| o.0 == order.raw());
            let yielded = orders.iter().any(|o| o.1 == buyer);
            let sale = self
                .sales
                .iter()
                .find(|s| s.voucher == bucket)
                .expect("a bucket");
            let named =
                sale.raw_record(UserId::from_raw(buyer)).await == Some(format!("l:{order}"));
            promise!(
                self,
                !told || back || yielded || named,
                "order {order} of buyer {buyer}, told and lost by MySQL, is neither back, nor \
                 yielded to another order of hers, nor named lost"
            );
        }
        for sale in &self.sales {
            let behind = sale.voucher_field("behind").await;
            let listed: bool = sale
                .conn
                .clone()
                .sismember(MYSQL_BEHIND, sale.voucher.to_string())
                .await
                .unwrap();
            promise!(
                self,
                behind.is_none() && !listed,
                "bucket {}: audited and quiet, still marked behind MySQL ({behind:?})",
                sale.voucher
            );
        }
        for (bucket, sale) in self.mysql_buckets().await.iter().zip(&self.sales) {
            let (redis, queued) = (sale.stock().await, sale.queue().await.len());
            let initial = sale.voucher_field("initial_stock").await;
            promise!(
                self,
                redis == Some(bucket.stock as i64)
                    && queued == 0
                    && initial == Some(bucket.initial as i64),
                "bucket {}: quiet, Redis stock {redis:?} ({queued} queued, of {initial:?}) \
                 against MySQL's {} (of {})",
                bucket.id,
                bucket.stock,
                bucket.initial
            );
        }
        Ok(())
    }
}

//! `lua/admission.lua`: decides a buyer in one round trip.

use crate::buckets::{parse_ids, ALL_OUT_MS, SIGHTING_MS};
use crate::ids::{BucketId, UserId};
pub use crate::line::LineFigures;
use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, ADMISSION};

use super::{
    parse_entries, Call, Entry, Keys, Limits, Ticket, AUDIT_MS, KEPT_AFTER_END_MS, LEASE_MS,
    LINE_HOLD_MS, LINE_WINDOW_MS, SWEEP_MS,
};

/// What admission decided for the buyer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The units she asked for are the buyer's: her purchase is queued with this ticket.
    Admitted(Ticket),
    /// Her earlier purchase is still queued, with this ticket.
    Queued(Ticket),
    AlreadyOrdered(OrderId),
    /// The opening draw handed her units, and its order of them is committed: her first
    /// press since hears it as her own.
    Won(OrderId, u32),
    /// Her order was cancelled: she may not buy again in this sale.
    Cancelled(OrderId),
    /// Her order expired unpaid: she may not buy again in this sale.
    Expired(OrderId),
    SoldOut,
    /// Fewer units are left than she asked for (a sale of one bucket): none was taken.
    Short {
        left: u64,
    },
    /// She asked for more units than the sale lets one buyer hold, and the bucket holds no
    /// purchase of hers (else she hears it): nothing was decided.
    TooMany {
        per_buyer: u64,
    },
    Ended,
    NotStarted,
    /// Redis holds no sale state for this voucher (it lost it, or the voucher does not
    /// exist), or one found behind MySQL.
    Missing,
    /// No voucher of this id exists: it is above the highest id MySQL handed out, or
    /// MySQL said so lately.
    Unknown,
    /// The queue is at its safety limit; nothing was taken.
    Throttled,
    /// Nothing decided: the sale is in buckets ([`Admission::others`] lists the other
    /// ones), and the buyer's press belongs to hers (docs/design.md, "Buckets").
    Buckets,
    /// This bucket of the sale has fewer units than she asked for ([`Admission::left`];
    /// none: sold out): the buyer tries the next one.
    BucketOut,
    /// The buyer is an entrant of the sale's opening draw, whose units are handed out
    /// from `draw_at_ms` (Redis's clock read `now_ms`).
    InDraw {
        draw_at_ms: i64,
        now_ms: i64,
    },
    /// The buyer is in the sale's line (she lost its draw, or joined it) and no unit is
    /// hers yet: her place in it for units given back ([`Admission::line`] has the rest).
    Waitlisted(u64),
    /// A look of a buyer with no place in the line and no purchase of the sale.
    NotInLine,
    /// A join or a look at a sale in buckets, which has no line.
    NoLine,
    /// Her home bucket says a walk of hers found her purchase in this bucket of the sale.
    Walked(BucketId),
    /// Her home bucket has nothing for her (sold out, or `ended`), and a walk of hers may
    /// hold a unit in another bucket: look in every one.
    Walk {
        ended: bool,
    },
}

/// What a buyer asks of the sale's line (docs/design.md, "The line"), as admission.lua's
/// `line` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LineAsk {
    /// A purchase.
    #[default]
    Press,
    /// A purchase, or her place in line when nothing is left for her.
    Join,
    /// Her standing: her purchase or order, or her place; never a new purchase.
    Look,
}

impl LineAsk {
    fn name(self) -> &'static str {
        match self {
            LineAsk::Press => "press",
            LineAsk::Join => "join",
            LineAsk::Look => "look",
        }
    }
}

/// Where a press is on the buyer's walk round a sale's buckets (docs/design.md,
/// "Buckets"), as admission.lua's `route` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The caller does not know the sale's buckets: a sale of several answers
    /// [`Decision::Buckets`].
    Unrouted,
    /// The buyer's own bucket.
    Home,
    /// Another bucket, hers having nothing for her: neither its mark nor its end stops
    /// the walk, which looks for her record in every bucket.
    Walk,
    /// Another bucket, on the only walk of hers under way: no bucket holds a record of
    /// hers, so a bucket marked all out ends the walk with [`Decision::SoldOut`].
    LoneWalk,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Unrouted => "unrouted",
            Route::Home => "home",
            Route::Walk => "walk",
            Route::LoneWalk => "lone_walk",
        }
    }
}

/// The drain lock, taken by this request, with the first batch to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub token: String,
    pub batch: Vec<Entry>,
}

/// Admission's whole reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub decision: Decision,
    /// This request holds the lease and drains before it answers.
    pub lease: Option<Lease>,
    /// This request sweeps the voucher's expired orders first (see `lua/admission.lua`).
    pub sweep: bool,
    /// Expiries are due and another request holds the sweep lease: it may be giving units
    /// back now.
    pub sweeping: bool,
    /// The sale's other buckets, for [`Decision::Buckets`].
    pub others: Vec<BucketId>,
    /// What this bucket knows of the sale's buckets sold out, for [`Decision::BucketOut`].
    pub seen_out: Vec<Sighting>,
    /// The units this bucket has left, for [`Decision::BucketOut`] and [`Decision::Walk`]:
    /// fewer than asked.
    pub left: u64,
    /// The sale's line, for [`Decision::Waitlisted`] and [`Decision::NotInLine`].
    pub line: LineFigures,
}

impl Admission {
    /// A reply that is its decision alone: no lease, no sweep, nothing else known.
    pub fn plain(decision: Decision) -> Admission {
        Admission {
            decision,
            lease: None,
            sweep: false,
            sweeping: false,
            others: Vec::new(),
            seen_out: Vec::new(),
            left: 0,
            line: LineFigures::default(),
        }
    }
}

/// When a bucket saw a bucket of the sale sold out: its place in the sale (the first
/// bucket's order) and Redis's unix ms.
pub type Sighting = (usize, i64);

/// Where a press is among its sale's buckets, and the sightings its walk gathered
/// (admission.lua's `buckets`, `here` and `sightings`): a sold-out bucket keeps them,
/// hands the walk its own, and marks itself all out once every bucket was seen sold out a
/// moment ago (docs/design.md, "Buckets").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sightings {
    /// How many buckets the sale has; 0 when the caller does not know them.
    pub buckets: usize,
    /// This bucket's place among them.
    pub here: usize,
    pub seen: Vec<Sighting>,
    /// When the sale they are the buckets of was created, unix seconds; 0 when not known
    /// (`Buckets::created`).
    pub created: i64,
}

/// Sightings as admission.lua writes them: `<place>:<ms>,...`.
fn sightings_arg(seen: &[Sighting]) -> String {
    seen.iter()
        .map(|(place, at)| format!("{place}:{at}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_sightings(text: &[u8]) -> Option<Vec<Sighting>> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|sighting| {
            let (place, at) = sighting.split_once(':')?;
            Some((place.parse().ok()?, at.parse().ok()?))
        })
        .collect()
}

/// A buyer's press, decided in one round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    pub voucher_id: BucketId,
    pub user: UserId,
    pub limits: Limits,
    pub route: Route,
    /// The buyer's place if she enters an opening draw: random, below 2^48, drawn by the
    /// caller for this press.
    pub draw_place: u64,
    pub sightings: Sightings,
    /// The units she asks for, 1 to [`super::MOST_PER_BUYER`].
    pub units: u32,
    pub line: LineAsk,
}

impl Call for Admit {
    type Output = Admission;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &ADMISSION,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.queue(),
                keys.lease(),
                keys.order_sequence(),
                keys.absent(),
                keys.metrics(),
                keys.highest_voucher(),
                keys.sweep(),
                keys.all_out(),
                keys.drawn(),
                keys.seen_out(),
            ]
            .into_iter()
            .chain(keys.lines())
            .collect(),
            args![
                user = self.user.to_string(),
                lease_ms = LEASE_MS,
                batch_size = self.limits.batch,
                max_queued = self.limits.max_queued,
                keep_ms = KEPT_AFTER_END_MS,
                voucher_id = self.voucher_id.to_string(),
                sweep_ms = SWEEP_MS,
                audit_ms = AUDIT_MS,
                slot = i64::from(keys.slot()),
                route = self.route.name(),
                draw_place = self.draw_place.to_string(),
                draw_batch = self.limits.draw_batch,
                buckets = self.sightings.buckets as i64,
                here = self.sightings.here as i64,
                sightings = sightings_arg(&self.sightings.seen),
                sighting_ms = SIGHTING_MS,
                units = i64::from(self.units),
                created = self.sightings.created,
                all_out_ms = ALL_OUT_MS,
                line = self.line.name(),
                line_window_ms = LINE_WINDOW_MS,
                line_hold_ms = LINE_HOLD_MS,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Admission, UnexpectedReply> {
        let (sweep, sweeping, answer) = match reply.as_slice() {
            [first, rest @ ..] if first.is_tag("sweep") => (true, false, rest),
            [first, rest @ ..] if first.is_tag("sweeping") => (false, true, rest),
            answer => (false, false, answer),
        };
        let parsed = match answer {
            [tag, Reply::Int(0), Reply::Bytes(ids)] if tag.is_tag("buckets") => {
                let ids = std::str::from_utf8(ids).ok().and_then(parse_ids);
                ids.map(|others| Admission {
                    others,
                    ..Admission::plain(Decision::Buckets)
                })
            }
            [tag, Reply::Int(0), Reply::Int(per_buyer)] if tag.is_tag("too_many") => {
                u64::try_from(*per_buyer).ok().map(|per_buyer| {
                    Admission::plain(Decision::TooMany { per_buyer })
                })
            }
            [Reply::Bytes(tag), Reply::Int(lead), rest @ ..] => {
                parse_decision(tag, rest).and_then(|(decision, rest)| {
                    let mut line = LineFigures::default();
                    let (seen_out, left, rest) = match (decision, rest) {
                        (
                            Decision::Waitlisted(_),
                            [Reply::Int(length @ 0..), Reply::Int(returned), Reply::Int(since_ms), Reply::Int(pay_within_s @ 0..), rest @ ..],
                        ) => {
                            line = LineFigures {
                                length: *length as u64,
                                returned: (*returned).max(0) as u64,
                                since_ms: *since_ms,
                                pay_within_s: *pay_within_s as u64,
                            };
                            (Vec::new(), 0, rest)
                        }
                        (Decision::NotInLine, [Reply::Int(length @ 0..), rest @ ..]) => {
                            line.length = *length as u64;
                            (Vec::new(), 0, rest)
                        }
                        (
                            Decision::BucketOut,
                            [Reply::Bytes(seen), Reply::Int(left @ 0..), rest @ ..],
                        ) => (parse_sightings(seen)?, *left as u64, rest),
                        (Decision::SoldOut, [Reply::Bytes(seen), rest @ ..]) => {
                            (parse_sightings(seen)?, 0, rest)
                        }
                        (Decision::Walk { .. }, [Reply::Int(left @ 0..), rest @ ..]) => {
                            (Vec::new(), *left as u64, rest)
                        }
                        (
                            Decision::BucketOut
                            | Decision::Walk { .. }
                            | Decision::SoldOut
                            | Decision::Waitlisted(_)
                            | Decision::NotInLine,
                            _,
                        ) => return None,
                        _ => (Vec::new(), 0, rest),
                    };
                    let lease = match (*lead, rest) {
                        (0, []) => None,
                        (1, [Reply::Bytes(token), entries @ ..]) => Some(Lease {
                            token: String::from_utf8(token.clone()).ok()?,
                            batch: parse_entries(entries)?,
                        }),
                        _ => return None,
                    };
                    Some(Admission {
                        decision,
                        lease,
                        sweep,
                        sweeping,
                        others: Vec::new(),
                        seen_out,
                        left,
                        line,
                    })
                })
            }
            _ => None,
        };
        parsed.ok_or(UnexpectedReply(reply))
    }
}

/// The decision named `tag` with its fields, and what follows them.
fn parse_decision<'a>(tag: &[u8], rest: &'a [Reply]) -> Option<(Decision, &'a [Reply])> {
    let ticket = |rest: &'a [Reply]| match rest {
        [Reply::Int(seconds), Reply::Int(sequence), Reply::Int(units), rest @ ..] => {
            let units = u32::try_from(*units).ok().filter(|units| *units > 0)?;
            let ticket = Ticket::new(*seconds, *sequence).for_units(units);
            ticket.order_id().ok().map(|_| (ticket, rest))
        }
        _ => None,
    };
    Some(match (tag, rest) {
        (b"admitted", rest) => ticket(rest).map(|(t, rest)| (Decision::Admitted(t), rest))?,
        (b"queued", rest) => ticket(rest).map(|(t, rest)| (Decision::Queued(t), rest))?,
        (b"won", [Reply::Bytes(id), Reply::Int(units @ 1..), rest @ ..]) => {
            let order_id = std::str::from_utf8(id).ok().and_then(OrderId::parse)?;
            (Decision::Won(order_id, u32::try_from(*units).ok()?), rest)
        }
        (b"already_ordered" | b"cancelled" | b"expired", [Reply::Bytes(id), rest @ ..]) => {
            let order_id = std::str::from_utf8(id).ok().and_then(OrderId::parse)?;
            let decision = match tag {
                b"already_ordered" => Decision::AlreadyOrdered(order_id),
                b"cancelled" => Decision::Cancelled(order_id),
                _ => Decision::Expired(order_id),
            };
            (decision, rest)
        }
        (b"sold_out", rest) => (Decision::SoldOut, rest),
        (b"short", [Reply::Int(left @ 1..), rest @ ..]) => {
            (Decision::Short { left: *left as u64 }, rest)
        }
        (b"bucket_out", rest) => (Decision::BucketOut, rest),
        (b"in_draw", [Reply::Int(draw_at_ms), Reply::Int(now_ms), rest @ ..]) => (
            Decision::InDraw {
                draw_at_ms: *draw_at_ms,
                now_ms: *now_ms,
            },
            rest,
        ),
        (b"waitlisted", [Reply::Int(place), rest @ ..]) if *place > 0 => {
            (Decision::Waitlisted(*place as u64), rest)
        }
        (b"ended", rest) => (Decision::Ended, rest),
        (b"walked", [Reply::Bytes(bucket), rest @ ..]) => {
            let bucket = std::str::from_utf8(bucket).ok().and_then(BucketId::parse)?;
            (Decision::Walked(bucket), rest)
        }
        (b"walk", [Reply::Int(ended @ (0 | 1)), rest @ ..]) => {
            (Decision::Walk { ended: *ended == 1 }, rest)
        }
        (b"not_started", rest) => (Decision::NotStarted, rest),
        (b"no_line", rest) => (Decision::NoLine, rest),
        (b"not_in_line", rest) => (Decision::NotInLine, rest),
        (b"missing", rest) => (Decision::Missing, rest),
        (b"unknown", rest) => (Decision::Unknown, rest),
        (b"throttled", rest) => (Decision::Throttled, rest),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order_id::EPOCH;

    fn bin(text: &str) -> Reply {
        Reply::text(text)
    }

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn parse(reply: Vec<Reply>) -> Result<Admission, UnexpectedReply> {
        Admit::parse(reply)
    }

    #[test]
    fn parses_every_admission_reply() {
        let t = Ticket::new(EPOCH + 10, 3);
        assert_eq!(t.order_id().unwrap(), OrderId::from_raw((10 << 32) | 3));
        let plain = Admission::plain;
        let cases = [
            (
                vec![bin("admitted"), int(0), int(EPOCH + 10), int(3), int(1)],
                plain(Decision::Admitted(t)),
            ),
            (
                vec![bin("queued"), int(0), int(EPOCH + 10), int(3), int(4)],
                plain(Decision::Queued(t.for_units(4))),
            ),
            (
                vec![bin("short"), int(0), int(2)],
                plain(Decision::Short { left: 2 }),
            ),
            (
                vec![bin("too_many"), int(0), int(3)],
                plain(Decision::TooMany { per_buyer: 3 }),
            ),
            (
                vec![bin("already_ordered"), int(0), bin("99")],
                plain(Decision::AlreadyOrdered(OrderId::from_raw(99))),
            ),
            (
                vec![bin("sold_out"), int(0), bin("")],
                plain(Decision::SoldOut),
            ),
            (
                vec![bin("sold_out"), int(0), bin("2:1700000000000")],
                Admission {
                    seen_out: vec![(2, 1_700_000_000_000)],
                    ..plain(Decision::SoldOut)
                },
            ),
            (
                vec![bin("won"), int(0), bin("98"), int(2)],
                plain(Decision::Won(OrderId::from_raw(98), 2)),
            ),
            (
                vec![bin("bucket_out"), int(0), bin(""), int(0)],
                plain(Decision::BucketOut),
            ),
            (
                vec![bin("bucket_out"), int(0), bin(""), int(2)],
                Admission {
                    left: 2,
                    ..plain(Decision::BucketOut)
                },
            ),
            (
                vec![
                    bin("bucket_out"),
                    int(0),
                    bin("0:1700000000123,2:1700000000456"),
                    int(0),
                ],
                Admission {
                    seen_out: vec![(0, 1_700_000_000_123), (2, 1_700_000_000_456)],
                    ..plain(Decision::BucketOut)
                },
            ),
            (
                vec![bin("in_draw"), int(0), int(2_000), int(1_500)],
                plain(Decision::InDraw {
                    draw_at_ms: 2_000,
                    now_ms: 1_500,
                }),
            ),
            (
                vec![
                    bin("waitlisted"),
                    int(0),
                    int(3),
                    int(40),
                    int(2),
                    int(60_000),
                    int(900),
                ],
                Admission {
                    line: LineFigures {
                        length: 40,
                        returned: 2,
                        since_ms: 60_000,
                        pay_within_s: 900,
                    },
                    ..plain(Decision::Waitlisted(3))
                },
            ),
            (
                vec![bin("not_in_line"), int(0), int(7)],
                Admission {
                    line: LineFigures {
                        length: 7,
                        ..LineFigures::default()
                    },
                    ..plain(Decision::NotInLine)
                },
            ),
            (vec![bin("no_line"), int(0)], plain(Decision::NoLine)),
            (
                vec![bin("buckets"), int(0), bin("8,9")],
                Admission {
                    others: [8, 9].map(BucketId::from_raw).to_vec(),
                    ..plain(Decision::Buckets)
                },
            ),
            (vec![bin("ended"), int(0)], plain(Decision::Ended)),
            (
                vec![bin("walked"), int(0), bin("12")],
                plain(Decision::Walked(BucketId::from_raw(12))),
            ),
            (
                vec![bin("walk"), int(0), int(1), int(0)],
                plain(Decision::Walk { ended: true }),
            ),
            (
                vec![bin("not_started"), int(0)],
                plain(Decision::NotStarted),
            ),
            (vec![bin("missing"), int(0)], plain(Decision::Missing)),
            (vec![bin("unknown"), int(0)], plain(Decision::Unknown)),
            (vec![bin("throttled"), int(0)], plain(Decision::Throttled)),
            (
                vec![
                    bin("admitted"),
                    int(1),
                    int(EPOCH + 10),
                    int(3),
                    int(1),
                    bin("5:1704067210:3"),
                    bin("8:1704067209:1"),
                    bin("5:1704067210:3"),
                ],
                Admission {
                    lease: Some(Lease {
                        token: "5:1704067210:3".into(),
                        batch: vec![
                            Entry {
                                user: UserId::from_raw(8),
                                ticket: Ticket::new(EPOCH + 9, 1),
                            },
                            Entry {
                                user: UserId::from_raw(5),
                                ticket: t,
                            },
                        ],
                    }),
                    ..plain(Decision::Admitted(t))
                },
            ),
            (
                vec![
                    bin("sweep"),
                    bin("sold_out"),
                    int(1),
                    bin(""),
                    bin("r:1:2:5"),
                ],
                Admission {
                    lease: Some(Lease {
                        token: "r:1:2:5".into(),
                        batch: vec![],
                    }),
                    sweep: true,
                    ..plain(Decision::SoldOut)
                },
            ),
            (
                vec![bin("sweeping"), bin("sold_out"), int(0), bin("")],
                Admission {
                    sweeping: true,
                    ..plain(Decision::SoldOut)
                },
            ),
        ];
        for (reply, admission) in cases {
            assert_eq!(parse(reply).unwrap(), admission);
        }
    }

    #[test]
    fn refuses_admission_replies_it_does_not_understand() {
        let odd = [
            vec![],
            vec![Reply::Nil],
            vec![bin("sold_out")],
            vec![bin("admitted"), int(0)],
            vec![bin("admitted"), int(0), int(EPOCH), int(1 << 32), int(1)],
            vec![bin("admitted"), int(0), int(EPOCH - 1), int(1), int(1)],
            vec![bin("admitted"), int(0), int(EPOCH + 1), int(1), int(0)],
            vec![bin("admitted"), int(0), int(EPOCH + 1), int(1)],
            vec![bin("short"), int(0), int(0)],
            vec![bin("bucket_out"), int(0), bin("")],
            vec![bin("already_ordered"), int(0), bin("x")],
            vec![bin("sold_out"), int(0), int(1)],
            vec![bin("sold_out"), int(2)],
            vec![bin("sold_out"), int(1), bin("r:1"), bin("not an entry")],
            vec![bin("whatever"), int(0)],
            vec![bin("buckets"), int(0), bin("8,x")],
            vec![bin("buckets"), int(1), bin("8")],
            vec![
                bin("waitlisted"),
                int(0),
                int(0),
                int(1),
                int(0),
                int(0),
                int(9),
            ],
            vec![bin("waitlisted"), int(0), int(1), int(1), int(0), int(0)],
            vec![bin("waitlisted"), int(0), int(3)],
            vec![bin("not_in_line"), int(1), int(7)],
            vec![bin("not_in_line"), int(0)],
            vec![bin("in_draw"), int(0), int(2_000)],
            vec![bin("walked"), int(0), bin("x")],
            vec![bin("walk"), int(0), int(2), int(0)],
            vec![bin("walk"), int(0), int(0)],
        ];
        for reply in odd {
            assert!(parse(reply.clone()).is_err(), "{reply:?}");
        }
    }
}

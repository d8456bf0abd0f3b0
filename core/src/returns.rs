//! Units of cancelled and expired orders back to the live sale, as a state machine that
//! does no I/O of its own (as the purchase is). MySQL gives each unit back to its stock,
//! with an event, in the transaction that cancels or expires its order; this hands
//! the events the sale has not applied yet to `lua/restock.lua`, which applies each once
//! (by event id), so a reply lost or a request dying halfway leaves the rest to the next
//! run, and two runs at once change Redis once per unit.
//!
//! A sweep ([`Returns::sweep`]) reads where the sale stands, expires the voucher's unpaid
//! orders past their deadline, gives back, and ends the sweep lease with the next
//! deadline (or an earlier one a publication set meanwhile, for an order the sweep may
//! not have seen). The component runs it for the press admission handed the sweep lease,
//! for `POST /vouchers/{id}/expire`, and (as a plain restock, [`Returns::restock`]) after
//! a cancellation; the schedule explorer runs the same steps with faults between them.

use crate::ids::VoucherId;
use crate::redis::{Command, Reply};
use crate::sale::{Call, Mark, ReadMark, Restock, Swept};
use crate::sql::Returned;

/// Orders expired, and returns read, per round trip.
pub const PAGE: u32 = 256;

/// What the run needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// `sql::EXPIRE_DUE` of the voucher, at most `limit` orders; resume with
    /// [`Input::Expired`].
    ExpireDue { limit: u32 },
    /// `sql::RETURNS_AFTER` of the voucher; resume with [`Input::Returns`].
    ReturnsAfter { after: u64, limit: u32 },
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// Over: the units given back to the sale now, or why it stopped (MySQL holds the
    /// truth, and the voucher's next sweep gives back what this did not).
    Done(Result<u64, String>),
}

/// The result of what the run asked for; a failure is its cause, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Orders expired, and the earliest deadline left (unix seconds).
    Expired(Result<(usize, Option<i64>), String>),
    Returns(Result<Vec<Returned>, String>),
    Redis(Result<Vec<Reply>, String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    ReadingMark,
    Expiring(Mark),
    /// Reading the returns after this mark.
    Reading(u64),
    /// Applying a page of returns read after the mark `after`; `last` when it was a short
    /// page.
    Restocking {
        returns: Vec<Returned>,
        after: u64,
        last: bool,
    },
    Done,
}

/// One run for one voucher.
#[derive(Debug, Clone)]
pub struct Returns {
    voucher_id: VoucherId,
    page: u32,
    sweeps: bool,
    /// For a sweep, once its expiring is over.
    swept: Option<Swept>,
    given: u64,
    phase: Phase,
}

impl Returns {
    /// A sweep of expiries, and what it needs first.
    pub fn sweep(voucher_id: VoucherId) -> (Returns, Io) {
        Returns::with_page(voucher_id, true, PAGE)
    }

    /// The returns MySQL holds and the sale has not applied, and what it needs first.
    pub fn restock(voucher_id: VoucherId) -> (Returns, Io) {
        Returns::with_page(voucher_id, false, PAGE)
    }

    /// A sweep (`sweeps`) or a restock in pages of `page`: a test's small pages make a
    /// run take several steps.
    pub fn with_page(voucher_id: VoucherId, sweeps: bool, page: u32) -> (Returns, Io) {
        let mut run = Returns {
            voucher_id,
            page,
            sweeps,
            swept: None,
            given: 0,
            phase: Phase::Done,
        };
        let io = run.read_mark();
        (run, io)
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next.
    pub fn resume(&mut self, input: Input) -> Io {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, input) {
            (Phase::ReadingMark, Input::Redis(reply)) => match parsed(&self.mark_call(), reply) {
                // A sweep expires first (once), and knows the deadlines it began with.
                Ok(mark) if self.sweeps && self.swept.is_none() => {
                    self.phase = Phase::Expiring(mark);
                    Io::ExpireDue { limit: self.page }
                }
                Ok(mark) => self.read_returns(mark),
                Err(cause) => Io::Done(Err(cause)),
            },
            (Phase::Expiring(mark), Input::Expired(Ok((expired, next)))) => {
                if expired < self.page as usize {
                    self.swept = Some(Swept {
                        next_ms: next.map(|seconds| seconds * 1000),
                        deadlines: mark.deadlines,
                    });
                    self.read_returns(mark)
                } else {
                    self.phase = Phase::Expiring(mark);
                    Io::ExpireDue { limit: self.page }
                }
            }
            (Phase::Reading(after), Input::Returns(Ok(returns))) => {
                let last = returns.len() < self.page as usize;
                let io = Io::Redis(self.restock_call(&returns, after, last).command());
                self.phase = Phase::Restocking {
                    returns,
                    after,
                    last,
                };
                io
            }
            (
                Phase::Restocking {
                    returns,
                    after,
                    last,
                },
                Input::Redis(reply),
            ) => {
                match parsed(&self.restock_call(&returns, after, last), reply) {
                    Ok(Some(given)) => {
                        self.given += given;
                        if last {
                            Io::Done(Ok(self.given))
                        } else {
                            self.read_mark()
                        }
                    }
                    // Redis holds no sale for the voucher: a sync rebuilds it, returns
                    // included.
                    Ok(None) => Io::Done(Ok(self.given)),
                    Err(cause) => Io::Done(Err(cause)),
                }
            }
            (_, Input::Expired(Err(cause)) | Input::Returns(Err(cause))) => Io::Done(Err(cause)),
            (phase, input) => unreachable!("{input:?} while {phase:?}"),
        }
    }

    fn mark_call(&self) -> ReadMark {
        ReadMark {
            voucher_id: self.voucher_id,
        }
    }

    fn read_mark(&mut self) -> Io {
        self.phase = Phase::ReadingMark;
        Io::Redis(self.mark_call().command())
    }

    fn read_returns(&mut self, mark: Mark) -> Io {
        self.phase = Phase::Reading(mark.returned);
        Io::ReturnsAfter {
            after: mark.returned,
            limit: self.page,
        }
    }

    fn restock_call<'a>(&self, returns: &'a [Returned], after: u64, last: bool) -> Restock<'a> {
        Restock {
            voucher_id: self.voucher_id,
            returns,
            after,
            swept: if last { self.swept } else { None },
        }
    }
}

fn parsed<C: Call>(call: &C, reply: Result<Vec<Reply>, String>) -> Result<C::Output, String> {
    call.parse(reply?)
        .map_err(|unexpected| unexpected.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order_id::OrderId;
    use crate::UserId;

    fn returned(event: u64) -> Returned {
        Returned {
            event,
            order_id: OrderId::from_raw(event + 100),
            user: UserId::from_raw(event),
            cancelled: true,
        }
    }

    fn restock_args(io: &Io) -> Vec<String> {
        match io {
            Io::Redis(Command::Script { script, args, .. }) if script.name == "restock" => {
                args.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected restock.lua, got {other:?}"),
        }
    }

    fn reads_mark(voucher_id: VoucherId) -> Io {
        Io::Redis(ReadMark { voucher_id }.command())
    }

    fn mark(returned: &str, deadlines: &str) -> Input {
        Input::Redis(Ok(vec![Reply::text(returned), Reply::text(deadlines)]))
    }

    #[test]
    fn a_sweep_reads_the_mark_expires_page_by_page_then_restocks_and_ends_on_the_last_page() {
        let voucher = VoucherId::from_raw(7);
        let (mut run, io) = Returns::with_page(voucher, true, 2);
        assert_eq!(io, reads_mark(voucher));
        assert_eq!(run.resume(mark("4", "9")), Io::ExpireDue { limit: 2 });
        assert_eq!(
            run.resume(Input::Expired(Ok((2, Some(50))))),
            Io::ExpireDue { limit: 2 }
        );
        let io = run.resume(Input::Expired(Ok((1, Some(60)))));
        assert_eq!(io, Io::ReturnsAfter { after: 4, limit: 2 });
        let io = run.resume(Input::Returns(Ok(vec![returned(5), returned(6)])));
        // A full page: not the last, so the sweep is not over yet; read after the mark 4.
        assert_eq!(restock_args(&io)[9..], ["-", "0", "4"]);
        let io = run.resume(Input::Redis(Ok(vec![Reply::Int(2)])));
        assert_eq!(io, reads_mark(voucher));
        // The next page's mark: it expires nothing again.
        let io = run.resume(mark("6", "10"));
        assert_eq!(io, Io::ReturnsAfter { after: 6, limit: 2 });
        let io = run.resume(Input::Returns(Ok(vec![returned(7)])));
        // The deadlines it began with, not the later ones; read after the mark 6.
        assert_eq!(restock_args(&io)[5..], ["60000", "9", "6"]);
        assert_eq!(
            run.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Done(Ok(3))
        );
    }

    #[test]
    fn a_restock_reads_the_mark_first_and_a_sweep_says_when_no_order_is_left_unpaid() {
        let voucher = VoucherId::from_raw(7);
        let (mut run, io) = Returns::restock(voucher);
        assert_eq!(io, reads_mark(voucher));
        let io = run.resume(Input::Redis(Ok(vec![Reply::Nil, Reply::Nil])));
        assert_eq!(
            io,
            Io::ReturnsAfter {
                after: 0,
                limit: PAGE
            }
        );
        let io = run.resume(Input::Returns(Ok(vec![])));
        assert_eq!(restock_args(&io), ["0", "-", "0", "0"]);
        assert_eq!(
            run.resume(Input::Redis(Ok(vec![Reply::Int(-1)]))),
            Io::Done(Ok(0))
        );
        let (mut sweep, _) = Returns::sweep(voucher);
        sweep.resume(mark("0", "3"));
        sweep.resume(Input::Expired(Ok((0, None))));
        let io = sweep.resume(Input::Returns(Ok(vec![])));
        assert_eq!(restock_args(&io), ["0", "", "3", "0"]);
    }

    #[test]
    fn a_failure_ends_the_run_with_its_cause() {
        let voucher = VoucherId::from_raw(7);
        let (mut run, _) = Returns::sweep(voucher);
        run.resume(mark("0", "0"));
        assert_eq!(
            run.resume(Input::Expired(Err("mysql: gone".into()))),
            Io::Done(Err("mysql: gone".into()))
        );
        let (mut run, _) = Returns::restock(voucher);
        assert_eq!(
            run.resume(Input::Redis(Err("redis: gone".into()))),
            Io::Done(Err("redis: gone".into()))
        );
        let (mut run, _) = Returns::restock(voucher);
        run.resume(mark("0", "0"));
        run.resume(Input::Returns(Ok(vec![])));
        assert!(matches!(
            run.resume(Input::Redis(Ok(vec![Reply::text("what")]))),
            Io::Done(Err(_))
        ));
    }
}

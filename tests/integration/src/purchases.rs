//! Purchases as the component runs them (`seckill_core::purchase`), with their I/O done on
//! the tests' own Redis and MariaDB connections, one step at a time: a test decides what
//! happens between two steps (another purchase's step, a fault, a lost reply).

use seckill_core::purchase::{Input, Io, Purchase};
use seckill_core::redis::{Command, Reply};
use seckill_core::returns;
use seckill_core::sale::Limits;
use seckill_core::{ApiError, UserId, VoucherId};

use crate::scripts::{self, Sale};

/// A purchase in flight, with what it asked for last.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub purchase: Purchase,
    pub io: Io,
}

impl InFlight {
    pub fn start(voucher: VoucherId, buyer: UserId, limits: Limits) -> InFlight {
        let (purchase, io) = Purchase::with_limits(voucher, buyer, limits);
        InFlight { purchase, io }
    }

    /// The buyer's answer, once the purchase is over.
    pub fn answer(&self) -> Option<&Result<seckill_core::purchase::Receipt, ApiError>> {
        match &self.io {
            Io::Answer(answer) => Some(answer),
            _ => None,
        }
    }

    /// Resumes it with `input`.
    pub fn resume(&mut self, input: Input) {
        self.io = self.purchase.resume(input);
    }

    /// Does what it asked for and resumes it with the result; a `BLPOP` does not block
    /// (see [`perform`]).
    pub async fn step(&mut self, sale: &Sale) {
        let input = perform(sale, &self.io).await;
        self.resume(input);
    }

    /// Steps it until it answers, for at most `steps` steps.
    pub async fn run(
        &mut self,
        sale: &Sale,
        steps: usize,
    ) -> Option<Result<seckill_core::purchase::Receipt, ApiError>> {
        for _ in 0..steps {
            if let Some(answer) = self.answer() {
                return Some(answer.clone());
            }
            self.step(sale).await;
        }
        self.answer().cloned()
    }
}

/// Does what a purchase asked for, on `sale`'s Redis and a MariaDB connection of its own,
/// and returns the result to resume it with. A wait for news (`BLPOP`) takes what is
/// there without blocking: in a test, nothing else happens while it would block, so a
/// wait that finds nothing is one that timed out.
pub async fn perform(sale: &Sale, io: &Io) -> Input {
    match io {
        Io::Redis(command) => Input::Redis(redis(sale, command).await),
        Io::Commit(batch) => Input::Committed(
            scripts::commit_batch(sale.voucher, batch)
                .await
                .map_err(|error| format!("mysql: {error}")),
        ),
        Io::ReadVoucher => Input::Voucher(scripts::lookup(sale.voucher).await),
        Io::Sweep(step) => Input::Sweep(give_back(sale, step).await),
        Io::Answer(answer) => panic!("the purchase is over: {answer:?}"),
    }
}

/// Does a step of a sweep or a restock (`seckill_core::returns`) on `sale`'s Redis and a
/// MariaDB connection of its own.
pub async fn give_back(sale: &Sale, io: &returns::Io) -> returns::Input {
    match io {
        returns::Io::ExpireDue { limit } => {
            returns::Input::Expired(scripts::expire_due(sale.voucher, *limit).await)
        }
        returns::Io::ReturnsAfter { after, limit } => {
            returns::Input::Returns(scripts::returns_after(sale.voucher, *after, *limit).await)
        }
        returns::Io::Commit(batch) => returns::Input::Committed(
            scripts::commit_batch(sale.voucher, batch)
                .await
                .map_err(|error| format!("mysql: {error}")),
        ),
        returns::Io::Redis(command) => returns::Input::Redis(redis(sale, command).await),
        returns::Io::Done(given) => panic!("the run is over: {given:?}"),
    }
}

/// A Redis command as [`perform`] runs it: a `BLPOP` as an `LPOP`, with `BLPOP`'s reply.
pub async fn redis(sale: &Sale, command: &Command) -> Result<Vec<Reply>, String> {
    let result = match command {
        Command::Plain {
            name: "BLPOP",
            args,
        } => {
            let pop = Command::plain("LPOP", vec![args[0].clone()]);
            sale.run(&pop).await.map(|reply| match reply.as_slice() {
                [Reply::Nil] => vec![Reply::Nil],
                [news] => vec![Reply::text(&args[0].to_string()), news.clone()],
                _ => panic!("LPOP answered {reply:?}"),
            })
        }
        command => sale.run(command).await,
    };
    result.map_err(|error| format!("redis: {error}"))
}

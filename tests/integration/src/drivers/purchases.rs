//! Purchases as the component runs them (`seckill_core::purchase`), with their I/O done on
//! the tests' own Redis and MariaDB connections, one step at a time: a test decides what
//! happens between two steps (another purchase's step, a fault, a lost reply).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use seckill_core::buckets::Buckets;
use seckill_core::drive::{self, Backend};
use seckill_core::ledger::Returned;
use seckill_core::purchase::{DrawPlace, Input, Io, Lookup, Purchase};
use seckill_core::redis::{Command, Reply};
use seckill_core::returns;
use seckill_core::sale::{Limits, LineAsk, Record};
use seckill_core::verdict::{Committed, Committing};
use seckill_core::{ApiError, BackendError, BucketId, OrderId, SaleId, UserId};

use crate::drivers::scripts::{self, Sale};

/// A press's place in an opening draw, random as the component draws it (each
/// `RandomState` is keyed anew).
fn random_place() -> DrawPlace {
    let bits = RandomState::new().hash_one(0u8);
    DrawPlace::from_random(u128::from(bits) << 64)
}

/// A purchase in flight, with what it asked for last.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub purchase: Purchase,
    pub io: Io,
}

impl InFlight {
    pub fn start(voucher: SaleId, buyer: UserId, limits: Limits) -> InFlight {
        InFlight::of_units(voucher, buyer, 1, limits)
    }

    /// A press for `units` units.
    pub fn of_units(voucher: SaleId, buyer: UserId, units: u32, limits: Limits) -> InFlight {
        let (purchase, io) = Purchase::with_limits(voucher, buyer, units, limits, random_place());
        InFlight { purchase, io }
    }

    /// What `buyer` asks of the sale's line (docs/design.md, "The line"), for `units`.
    pub fn in_line(voucher: SaleId, buyer: UserId, units: u32, line: LineAsk) -> InFlight {
        InFlight::in_line_with(voucher, buyer, units, Limits::SHIPPED, line)
    }

    /// What `buyer` asks of the sale's line, for `units`, as a press of `limits` (a press
    /// when `line` is [`LineAsk::Press`]).
    pub fn in_line_with(
        voucher: SaleId,
        buyer: UserId,
        units: u32,
        limits: Limits,
        line: LineAsk,
    ) -> InFlight {
        let (purchase, io) =
            Purchase::in_line_with_limits(voucher, buyer, units, limits, random_place(), line);
        InFlight { purchase, io }
    }

    /// A press for `units` units of a sale whose buckets the caller knows, as the WASIp3
    /// build's instances remember them.
    pub fn knowing(buckets: Buckets, buyer: UserId, units: u32, limits: Limits) -> InFlight {
        let (purchase, io) = Purchase::knowing(buckets, buyer, units, limits, random_place());
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
        let input = perform(sale, &self.purchase, &self.io).await;
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

/// Does what `purchase` asked for, at its bucket, on `sale`'s Redis and MariaDB
/// connections of its own ([`SaleBackend`], through the component's driver), and returns
/// the result to resume it with.
pub async fn perform(sale: &Sale, purchase: &Purchase, io: &Io) -> Input {
    drive::purchase_step(&mut SaleBackend(sale), purchase.bucket(), io.clone()).await
}

/// The cause of an I/O that [`failed`].
const LOST: &str = "connection lost";

/// What a purchase gets back when its I/O `io` fails on the way (the server out of reach,
/// or its reply lost).
pub fn failed(io: &Io) -> Input {
    match io {
        Io::Redis(_) => Input::Redis(Err(BackendError::Redis(LOST.into()))),
        Io::Commit(_) => Input::Committed(Err(BackendError::Mysql(LOST.into()))),
        Io::ReadVoucher => Input::Voucher(Err(BackendError::Mysql(LOST.into()))),
        Io::Sweep(step) => Input::Sweep(give_back_failed(step)),
        Io::Answer(_) => unreachable!("an answered purchase asks for nothing"),
    }
}

/// What a give-back's I/O gets back when it fails.
pub fn give_back_failed(io: &returns::Io) -> returns::Input {
    let mysql = BackendError::Mysql(LOST.into());
    match io {
        returns::Io::ExpireDue { .. } => returns::Input::Expired(Err(mysql)),
        returns::Io::ReturnsAfter { .. } => returns::Input::Returns(Err(mysql)),
        returns::Io::Commit(_) => returns::Input::Committed(Err(mysql)),
        returns::Io::Redis(_) => returns::Input::Redis(Err(BackendError::Redis(LOST.into()))),
        returns::Io::Done(_) => unreachable!("a give-back that is over asks for nothing"),
    }
}

/// Does a step of a sweep or a restock (`seckill_core::returns`) as [`perform`] does.
pub async fn give_back(sale: &Sale, io: &returns::Io) -> returns::Input {
    drive::returns_step(&mut SaleBackend(sale), sale.voucher, io.clone()).await
}

/// The state machines' port (`seckill_core::drive::Backend`) on `sale`'s Redis connection
/// and a MariaDB connection per statement, as each Spin request opens its own. A wait for
/// news (`BLPOP`) takes what is there without blocking: in a test, nothing else happens
/// while it would block, so a wait that finds nothing is one that timed out.
pub struct SaleBackend<'a>(pub &'a Sale);

impl Backend for SaleBackend<'_> {
    async fn redis(&mut self, command: &Command) -> Result<Vec<Reply>, BackendError> {
        redis(self.0, command).await
    }

    async fn commit(
        &mut self,
        bucket: BucketId,
        batch: &[Committing],
    ) -> Result<Committed, BackendError> {
        scripts::commit_batch(bucket, batch)
            .await
            .map_err(scripts::mysql)
    }

    async fn lookup(&mut self, bucket: BucketId) -> Result<Lookup, BackendError> {
        scripts::lookup(bucket).await
    }

    async fn expire_due(
        &mut self,
        bucket: BucketId,
        limit: u32,
    ) -> Result<(usize, Option<i64>), BackendError> {
        scripts::expire_due(bucket, limit).await
    }

    async fn returns_after(
        &mut self,
        bucket: BucketId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Returned>, BackendError> {
        scripts::returns_after(bucket, after, limit).await
    }

    async fn buyers_page(
        &mut self,
        bucket: BucketId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<(UserId, Record)>, BackendError> {
        let mut conn = scripts::connect().await.map_err(scripts::mysql)?;
        let page = scripts::buyers_page(&mut conn, bucket, after, limit).await;
        conn.disconnect().await.map_err(scripts::mysql)?;
        page
    }
}

/// A Redis command as [`perform`] runs it: a `BLPOP` as an `LPOP`, with `BLPOP`'s reply,
/// and a `BLMOVE` as an `LMOVE`.
pub async fn redis(sale: &Sale, command: &Command) -> Result<Vec<Reply>, BackendError> {
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
        // The wait for a sweep's end: a wake-up there or none, at once.
        Command::Plain {
            name: "BLMOVE",
            args,
        } => sale.run(&Command::plain("LMOVE", args[..4].to_vec())).await,
        command => sale.run(command).await,
    };
    result.map_err(|error| BackendError::Redis(error.to_string()))
}

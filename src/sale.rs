//! A voucher's sale state in Redis, through Spin's outbound Redis API. What to send and
//! what the replies mean is `seckill_core::sale`; this module runs it.

use spin_sdk::redis::{self, Connection, RedisParameter, RedisResult};

use seckill_core::ids::{UserId, VoucherId};
use seckill_core::order_id::OrderId;
use seckill_core::redis::{is_noscript, Arg, Command, Reply, UnexpectedReply};
use seckill_core::sale::{self as commands, Figures, Probe, Terms, View, STALE, VOUCHERS};

#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error("redis: {0}")]
    Redis(#[from] redis::Error),
    #[error(transparent)]
    Reply(#[from] UnexpectedReply),
    /// Another sync of the voucher holds the lease.
    #[error("another sync of this voucher is in progress")]
    SyncInProgress,
    /// The sync lost its lease (another sync took over, or Redis restarted); the terms
    /// were not installed.
    #[error("the sync was interrupted")]
    SyncLost,
}

pub struct Sale {
    redis: Connection,
}

impl Sale {
    /// Spin opens a new connection per `open`, so a request opens one and reuses it.
    pub fn connect(url: &str) -> Result<Sale, SaleError> {
        Ok(Sale {
            redis: Connection::open(url)?,
        })
    }

    /// Runs a command: one round trip, or two for a script Redis has forgotten (the
    /// EVAL caches it again, so the next EVALSHA finds it).
    pub fn run(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        let (name, args) = command.parts();
        match self.redis.execute(name, &parameters(args)) {
            Err(redis::Error::Other(message)) if is_noscript(&message) => {
                let (name, args) = command.eval_fallback().expect("only scripts are EVALSHA");
                self.redis.execute(name, &parameters(args))
            }
            result => result,
        }
        .map(|reply| reply.into_iter().map(from_spin).collect())
    }

    fn read<T>(
        &self,
        command: Command,
        parse: impl FnOnce(Vec<Reply>) -> Result<T, UnexpectedReply>,
    ) -> Result<T, SaleError> {
        Ok(parse(self.run(&command)?)?)
    }

    pub fn ping(&self) -> Result<(), SaleError> {
        self.read(Command::plain("PING", Vec::new()), commands::parse_pong)
    }

    /// Whether this request may ask MySQL on behalf of `probe`; see
    /// [`commands::take_probe`].
    pub fn may_ask_mysql(&self, probe: Probe) -> Result<bool, SaleError> {
        self.read(commands::take_probe(probe), commands::parse_set_nx)
    }

    /// Whether MySQL said lately that no voucher of this id exists.
    pub fn is_absent(&self, voucher_id: VoucherId) -> Result<bool, SaleError> {
        self.read(commands::is_absent(voucher_id), commands::parse_exists)
    }

    pub fn mark_absent(&self, voucher_id: VoucherId) -> Result<(), SaleError> {
        self.run(&commands::mark_absent(voucher_id))?;
        Ok(())
    }

    /// MySQL's health as the last `/health` probe found it, if it is recent.
    pub fn mysql_health(&self) -> Result<Option<bool>, SaleError> {
        self.read(commands::mysql_health(), commands::parse_mysql_health)
    }

    pub fn remember_mysql_health(&self, ok: bool) -> Result<(), SaleError> {
        self.run(&commands::remember_mysql_health(ok))?;
        Ok(())
    }

    /// Starts a sync: takes the voucher's sync lease for `token`.
    pub fn begin_load(&self, voucher_id: VoucherId, token: &str) -> Result<(), SaleError> {
        match self.read(
            commands::begin_load(voucher_id, token),
            commands::parse_set_nx,
        )? {
            true => Ok(()),
            false => Err(SaleError::SyncInProgress),
        }
    }

    /// Merges a page of the buyers MySQL holds orders for, and extends the lease.
    pub fn stage_buyers(
        &self,
        voucher_id: VoucherId,
        token: &str,
        buyers: &[(UserId, OrderId)],
    ) -> Result<(), SaleError> {
        let command = commands::stage_buyers(voucher_id, token, buyers);
        self.expect_done(command)
    }

    /// Installs a voucher just created: no buyers, no sync lease involved.
    pub fn load_new(&self, voucher_id: VoucherId, terms: &Terms) -> Result<(), SaleError> {
        self.finish_load(voucher_id, "", terms)
    }

    /// Installs the terms at the end of the sync holding `token` (buyers and the queue
    /// stay as they are), and ends its lease.
    pub fn finish_load(
        &self,
        voucher_id: VoucherId,
        token: &str,
        terms: &Terms,
    ) -> Result<(), SaleError> {
        self.expect_done(commands::load(voucher_id, token, terms))
    }

    fn expect_done(&self, command: Command) -> Result<(), SaleError> {
        match self.read(command, commands::parse_done)? {
            true => Ok(()),
            false => Err(SaleError::SyncLost),
        }
    }

    /// Removes a voucher's sale state: undoes the load of a creation that failed.
    pub fn forget(&self, voucher_id: VoucherId) -> Result<(), SaleError> {
        self.run(&commands::forget(voucher_id))?;
        self.run(&commands::unlist(voucher_id))?;
        Ok(())
    }

    /// The ids of the vouchers Redis holds a sale for, in order.
    pub fn vouchers(&self) -> Result<Vec<VoucherId>, SaleError> {
        self.read(commands::voucher_set(VOUCHERS), commands::parse_voucher_set)
    }

    /// The ids of the vouchers whose sale state was found behind MySQL, in order.
    pub fn stale_vouchers(&self) -> Result<Vec<VoucherId>, SaleError> {
        self.read(commands::voucher_set(STALE), commands::parse_voucher_set)
    }

    /// One voucher's figures; `None` (and the voucher leaves the set, so a scrape stays
    /// small) when Redis no longer holds its sale or it ended long ago.
    pub fn figures(&self, voucher_id: VoucherId) -> Result<Option<Figures>, SaleError> {
        let figures = self.read(commands::figures(voucher_id), commands::parse_figures)?;
        if figures.is_none() {
            self.run(&commands::unlist(voucher_id))?;
        }
        Ok(figures)
    }

    /// The voucher as Redis holds it, with Redis's clock; `None` when Redis has no
    /// complete state for it.
    pub fn view(&self, voucher_id: VoucherId) -> Result<Option<View>, SaleError> {
        self.read(commands::view(voucher_id), commands::parse_view)
    }
}

fn parameters(args: Vec<Arg>) -> Vec<RedisParameter> {
    args.into_iter()
        .map(|arg| match arg {
            Arg::Int(n) => RedisParameter::Int64(n),
            Arg::Text(text) => RedisParameter::Binary(text.into_bytes()),
        })
        .collect()
}

fn from_spin(value: RedisResult) -> Reply {
    match value {
        RedisResult::Nil => Reply::Nil,
        RedisResult::Status(status) => Reply::Status(status),
        RedisResult::Int64(n) => Reply::Int(n),
        RedisResult::Binary(bytes) => Reply::Bytes(bytes),
    }
}

//! Asking MySQL at most once a second: who may ask ([`TakeProbe`]), what Redis keeps of
//! the health probe's answer ([`KeepFinding`]), and Redis's own health ([`Ping`]). A
//! voucher lookup's own asking and answer are scripts of their own ([`super::AskMysql`],
//! [`super::Probed`]).

use crate::ids::{BucketId, UserId};
use crate::redis::{Command, Reply, UnexpectedReply};

use super::{parse_any, parse_set_nx, set_nx, Call, MYSQL_HEALTH, MYSQL_HEALTH_MS, MYSQL_READS};

/// How many lookup slots the vouchers share ([`Probe::VoucherLookup`]): at most this many
/// lookups a second ask MySQL, a connection each, whatever the ids asked about.
pub const LOOKUP_SLOTS: u64 = 64;

/// Who asks MySQL, at most once a second each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A voucher Redis holds no sale for, by a purchase or `GET /vouchers/{id}`: one
    /// probe for both routes and for the vouchers of its slot (the id modulo
    /// [`LOOKUP_SLOTS`]), so that reads of ids Redis holds nothing of keep the slots of
    /// theirs busy, not every other voucher's, and a flood of made-up ids (each new)
    /// still asks MySQL a bounded number of times a second.
    VoucherLookup(BucketId),
    /// The lookups of every voucher while Redis does not know the highest id (after a
    /// loss, before a creation or a lookup sets it): any id may be made up then, so one a
    /// second for them all, and its answer sets the highest id.
    AnyVoucherLookup,
    /// `GET /health`.
    Health,
    /// The feed's reads sweeping the sales with orders past their deadline: one a second,
    /// however many readers page through it.
    OverdueSweeps,
    /// A buyer's reads of her orders from MySQL.
    Reads(UserId),
    /// A buyer's cancellations, until one changes an order of hers ([`FreeProbe`]): any
    /// other (someone else's order, a made-up id, an order already settled) asks MySQL
    /// once a second at most.
    Cancels(UserId),
}

impl Probe {
    pub(super) fn key(self) -> String {
        match self {
            Probe::VoucherLookup(voucher) => format!(
                "seckill:{{seckill}}:probe:voucher-lookup:{}",
                voucher.raw() % LOOKUP_SLOTS
            ),
            Probe::AnyVoucherLookup => "seckill:{seckill}:probe:voucher-lookup".to_string(),
            Probe::Health => "seckill:probe:health".to_string(),
            Probe::OverdueSweeps => "seckill:probe:overdue-sweeps".to_string(),
            Probe::Reads(user) => format!("seckill:probe:reads:{user}"),
            Probe::Cancels(user) => format!("seckill:probe:cancels:{user}"),
        }
    }
}

/// Takes `probe` for a second: whether this request may ask MySQL on its behalf. One
/// request per probe and second, so that a crowd (buyers pressing after Redis lost its
/// data, or anonymous clients asking for ids that do not exist) never becomes a crowd of
/// MySQL connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeProbe {
    pub probe: Probe,
}

impl Call for TakeProbe {
    type Output = bool;

    fn command(&self) -> Command {
        set_nx(self.probe.key(), "1", 1_000)
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_set_nx(reply)
    }
}

/// Gives `probe` back before its second is over: the request it let through did what
/// the probe bounds only when it did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeProbe {
    pub probe: Probe,
}

impl Call for FreeProbe {
    type Output = ();

    fn command(&self) -> Command {
        Command::plain("DEL", vec![self.probe.key().into()])
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}

/// What a `/health` probe finds out of MySQL, kept for the requests of the next seconds
/// (the probe runs once a second at most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// Whether MySQL answered.
    MysqlAnswers,
    /// Whether MySQL's reads wait for a cluster's commits: always but on a Galera node
    /// with `wsrep_sync_wait` off.
    MysqlReadsFresh,
}

impl Finding {
    fn key(self) -> &'static str {
        match self {
            Finding::MysqlAnswers => MYSQL_HEALTH,
            Finding::MysqlReadsFresh => MYSQL_READS,
        }
    }

    /// What Redis keeps for yes and for no.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Finding::MysqlAnswers => ("ok", "down"),
            Finding::MysqlReadsFresh => ("fresh", "may_lag"),
        }
    }
}

/// The last probe's `finding`: `Some(yes)` when it is recent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadFinding(pub Finding);

impl Call for ReadFinding {
    type Output = Option<bool>;

    fn command(&self) -> Command {
        Command::plain("GET", vec![self.0.key().into()])
    }

    fn parse(reply: Vec<Reply>) -> Result<Option<bool>, UnexpectedReply> {
        match reply.as_slice() {
            // Each finding's yes differs from every finding's no: the word says which.
            [Reply::Bytes(word)] => Ok(Some(
                [Finding::MysqlAnswers, Finding::MysqlReadsFresh]
                    .iter()
                    .any(|finding| word == finding.words().0.as_bytes()),
            )),
            [Reply::Nil] => Ok(None),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Keeps what a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepFinding {
    pub finding: Finding,
    pub yes: bool,
}

impl Call for KeepFinding {
    type Output = ();

    fn command(&self) -> Command {
        let (yes, no) = self.finding.words();
        Command::plain(
            "SET",
            vec![
                self.finding.key().into(),
                (if self.yes { yes } else { no }).into(),
                "PX".into(),
                MYSQL_HEALTH_MS.into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}

/// Whether Redis answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping;

impl Call for Ping {
    type Output = ();

    fn command(&self) -> Command {
        Command::plain("PING", Vec::new())
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Status(pong)] if pong == "PONG" => Ok(()),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

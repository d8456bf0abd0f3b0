//! A queued purchase waiting for its outcome: a blocking pop of its outcome list
//! ([`Wait`]), then `lua/claim.lua` when none came ([`Claim`]).

use crate::ids::BucketId;
use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, CLAIM};
use crate::verdict::{Told, Verdict};

use super::{Call, Entry, Keys, LEASE_MS};

/// How long a queued purchase's request blocks for news in one `BLPOP` before it checks
/// on the drainer (Redis takes fractional timeouts from 6.0 on).
pub const WAIT_SLICE: &str = "0.5";

/// What a waiting purchase found in its outcome list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    Verdict(Verdict),
    /// The lease was handed to this purchase: its request drains next.
    Lead,
}

/// What `claim.lua` found for a purchase that waited without news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    News(News),
    /// The lease was free and is now this purchase's.
    Lead,
    /// Still queued, and someone drains.
    Wait,
    /// No outcome, but her record says she holds this order (a sync recorded it).
    Held(OrderId),
    /// No longer queued and no outcome left: Redis lost it.
    Lost,
}

/// Waits up to [`WAIT_SLICE`] for news of the queued purchase `entry`; `None` when none
/// came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub voucher_id: BucketId,
    pub entry: Entry,
}

impl Call for Wait {
    type Output = Option<News>;

    fn command(&self) -> Command {
        Command::plain(
            "BLPOP",
            vec![
                Keys::new(self.voucher_id).done(self.entry).into(),
                WAIT_SLICE.into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Option<News>, UnexpectedReply> {
        match reply.as_slice() {
            [] | [Reply::Nil] => Ok(None),
            [Reply::Bytes(_key), Reply::Bytes(news)] => {
                parse_news(news).map(Some).ok_or(UnexpectedReply(reply))
            }
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// For a queued purchase that waited without news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub voucher_id: BucketId,
    pub entry: Entry,
}

impl Call for Claim {
    type Output = Claimed;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &CLAIM,
            vec![keys.buyers(), keys.lease(), keys.done(self.entry)],
            args![
                user = self.entry.user.to_string(),
                ticket = self.entry.ticket.to_string(),
                lease_ms = LEASE_MS,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Claimed, UnexpectedReply> {
        let claimed = match reply.as_slice() {
            [tag, Reply::Bytes(news)] if tag.is_tag("outcome") => {
                parse_news(news).map(Claimed::News)
            }
            [tag] if tag.is_tag("lead") => Some(Claimed::Lead),
            [tag] if tag.is_tag("wait") => Some(Claimed::Wait),
            [tag, Reply::Bytes(order_id)] if tag.is_tag("held") => std::str::from_utf8(order_id)
                .ok()
                .and_then(OrderId::parse)
                .map(Claimed::Held),
            [tag] if tag.is_tag("lost") => Some(Claimed::Lost),
            _ => None,
        };
        claimed.ok_or(UnexpectedReply(reply))
    }
}

/// A [`Told`] verdict or `lead`, as `lua/publish.lua` writes them.
fn parse_news(news: &[u8]) -> Option<News> {
    if news == b"lead" {
        return Some(News::Lead);
    }
    let told: Told = serde_json::from_slice(news).ok()?;
    told.verdict().map(|(verdict, _)| News::Verdict(verdict))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_reads_as_publish_writes_it() {
        let news = [
            ("lead", Some(News::Lead)),
            (
                r#"{"outcome":"ordered","order":"5","units":1}"#,
                Some(News::Verdict(Verdict::Ordered)),
            ),
            (
                r#"{"order":"6","outcome":"duplicate","units":3}"#,
                Some(News::Verdict(Verdict::Duplicate(OrderId::from_raw(6), 3))),
            ),
            (
                r#"{"outcome":"sold_out","order":"5","units":2}"#,
                Some(News::Verdict(Verdict::SoldOut)),
            ),
            (
                r#"{"outcome":"id_taken","order":"5","units":1}"#,
                Some(News::Verdict(Verdict::IdTaken)),
            ),
            (r#"{"outcome":"duplicate","order":"x"}"#, None),
            (r#"{"outcome":"ordered"}"#, None),
            (r#"{"outcome":"ordered","order":"5"}"#, None),
            (r#"{"outcome":"other","order":"5"}"#, None),
            ("ordered:5", None),
        ];
        for (text, expected) in news {
            assert_eq!(parse_news(text.as_bytes()), expected, "{text:?}");
        }
    }
}

//! The sets of vouchers kept beside the sales: [`VOUCHERS`] (what `GET /metrics` reports
//! on), [`STALE`] and [`MYSQL_BEHIND`] (what `GET /health` names). Each is a key of its
//! own, so on a Redis Cluster it lives in a slot of its own, and a script may only touch
//! its own slot's keys. The scripts that change whether a voucher belongs in a set say so
//! in their reply instead, and the client sends the set's update after the script (an
//! `SADD` or `SREM`, which changes nothing when repeated). The voucher's hash holds the
//! truth the sale goes by; a request that dies between the two leaves a set behind it
//! until that script's next such reply. Likewise, on a cluster, the deployment's highest
//! voucher id ([`HIGHEST_VOUCHER`]) follows each slot's copy a creation or a lookup
//! raised. [`Members`] reads a set, [`Unlist`] takes a voucher off [`VOUCHERS`].

use crate::ids::BucketId;
use crate::redis::{Command, Reply, UnexpectedReply, AUDIT, LOAD, PROBED, PUBLISH};

use super::raise::raise;
use super::{parse_any, Call, MYSQL_BEHIND, STALE, VOUCHERS};

/// The set updates `command`'s `reply` calls for, in order.
pub fn listings(command: &Command, reply: &[Reply]) -> Vec<Command> {
    let Command::Script { script, keys, args } = command else {
        return Vec::new();
    };
    let Some(voucher) = keys.first().and_then(|key| hash_tag(key)) else {
        return Vec::new();
    };
    let change = |name: &'static str, set: &'static str| {
        Command::plain(name, vec![set.into(), voucher.into()])
    };
    if **script == AUDIT {
        match reply {
            [Reply::Int(1)] => vec![change("SADD", MYSQL_BEHIND)],
            [Reply::Int(0)] => vec![change("SREM", MYSQL_BEHIND)],
            _ => Vec::new(),
        }
    } else if **script == LOAD {
        match reply {
            [Reply::Int(1)] => {
                let mut listings = vec![
                    change("SADD", VOUCHERS),
                    change("SREM", STALE),
                    change("SREM", MYSQL_BEHIND),
                ];
                listings.extend(
                    args.get("highest")
                        .and_then(|highest| raise(&keys[5], highest)),
                );
                listings
            }
            [Reply::Int(2)] => vec![change("SADD", STALE)],
            _ => Vec::new(),
        }
    } else if **script == PROBED {
        args.get("highest")
            .and_then(|highest| raise(&keys[1], highest))
            .into_iter()
            .collect()
    } else if **script == PUBLISH {
        match reply {
            [first, ..] if first.is_tag("stale") => vec![change("SADD", STALE)],
            _ => Vec::new(),
        }
    } else {
        Vec::new()
    }
}

/// The members of one of the sets of voucher ids ([`VOUCHERS`], [`super::STALE`]), in
/// order; a member that is no id is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Members {
    pub set: &'static str,
}

impl Call for Members {
    type Output = Vec<BucketId>;

    fn command(&self) -> Command {
        Command::plain("SMEMBERS", vec![self.set.into()])
    }

    fn parse(reply: Vec<Reply>) -> Result<Vec<BucketId>, UnexpectedReply> {
        let mut ids = Vec::with_capacity(reply.len());
        for member in &reply {
            match member {
                Reply::Bytes(bytes) => {
                    ids.extend(std::str::from_utf8(bytes).ok().and_then(BucketId::parse))
                }
                _ => return Err(UnexpectedReply(reply)),
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }
}

/// Takes the voucher off the set `GET /metrics` reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlist {
    pub voucher_id: BucketId,
}

impl Call for Unlist {
    type Output = ();

    fn command(&self) -> Command {
        Command::plain(
            "SREM",
            vec![VOUCHERS.into(), self.voucher_id.to_string().into()],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}

/// The text between the first `{` and the next `}`.
fn hash_tag(key: &str) -> Option<&str> {
    let (_, rest) = key.split_once('{')?;
    rest.split_once('}').map(|(tag, _)| tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::VoucherId;
    use crate::sale::{Audit, Probed, Raise, HIGHEST_VOUCHER};

    fn audit() -> Command {
        Audit {
            voucher_id: BucketId::from_raw(42),
            missing: 1,
            mysql: crate::ledger::Ledger::default(),
            mark: 0,
        }
        .command()
    }

    #[test]
    fn a_script_s_reply_says_which_set_changes() {
        let add = Command::plain("SADD", vec![MYSQL_BEHIND.into(), "42".into()]);
        let remove = Command::plain("SREM", vec![MYSQL_BEHIND.into(), "42".into()]);
        assert_eq!(listings(&audit(), &[Reply::Int(1)]), [add]);
        assert_eq!(listings(&audit(), &[Reply::Int(0)]), [remove]);
        assert_eq!(listings(&audit(), &[]), []);
        let plain = Command::plain("GET", vec!["seckill:{42}:voucher".into()]);
        assert_eq!(listings(&plain, &[Reply::Int(1)]), []);
    }

    #[test]
    fn a_slot_s_highest_id_raises_the_deployment_s() {
        let probed = |highest_key: &str| {
            let Command::Script { script, args, .. } = Probed {
                voucher_id: BucketId::from_raw(42),
                absent: false,
                highest: Some(VoucherId::from_raw(42)),
            }
            .command() else {
                unreachable!("a script")
            };
            let keys = vec!["seckill:{42}:absent".into(), highest_key.into()];
            Command::Script { script, keys, args }
        };
        let raised = Raise {
            highest: &"42".into(),
        }
        .command();
        assert_eq!(
            listings(&probed("seckill:{7}:highest-voucher"), &[Reply::Int(1)]),
            [raised]
        );
        // On one Redis the script raised the deployment's own.
        assert_eq!(listings(&probed(HIGHEST_VOUCHER), &[Reply::Int(1)]), []);
    }
}

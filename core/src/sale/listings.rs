//! The sets of vouchers kept beside the sales: [`VOUCHERS`] (what `GET /metrics` reports
//! on), [`STALE`] and [`MYSQL_BEHIND`] (what `GET /health` names). Each is a key of its
//! own, so on a Redis Cluster it lives in a slot of its own, and a script may only touch
//! its own slot's keys. The scripts that change whether a voucher belongs in a set say so
//! in their reply instead, and the client sends the set's update after the script (an
//! `SADD` or `SREM`, which changes nothing when repeated). The voucher's hash holds the
//! truth the sale goes by; a request that dies between the two leaves a set behind it
//! until that script's next such reply.

use crate::redis::{Command, Reply, AUDIT, LOAD, PUBLISH};

use super::{MYSQL_BEHIND, STALE, VOUCHERS};

/// The set updates `command`'s `reply` calls for, in order.
pub fn listings(command: &Command, reply: &[Reply]) -> Vec<Command> {
    let Command::Script { script, keys, .. } = command else {
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
            [Reply::Int(1)] => vec![change("SADD", VOUCHERS), change("SREM", STALE)],
            [Reply::Int(2)] => vec![change("SADD", STALE)],
            _ => Vec::new(),
        }
    } else if **script == PUBLISH {
        match reply {
            [first, ..] if first.is_tag("stale") => vec![change("SADD", STALE)],
            _ => Vec::new(),
        }
    } else {
        Vec::new()
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
    use crate::sale::{Audit, Call};

    fn audit() -> Command {
        Audit {
            voucher_id: VoucherId::from_raw(42),
            missing: 1,
            returned_event: 0,
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
}

//! Redis Cluster as a client sees it: which slot a key hashes to, which primary serves a
//! slot (the map read from `CLUSTER NODES`), and what a redirect says. The component
//! routes every command by these (`delivery`, src/storage/redis.rs); nothing here does I/O.

pub mod delivery;

use std::fmt;

/// The slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

// SLOT_TAGS, by build.rs.
include!(concat!(env!("OUT_DIR"), "/slot_tags.rs"));

/// The slot Redis Cluster puts `key` in: CRC16 (XMODEM) of its hash tag (the text between
/// the first `{` and the next `}`, when not empty), else of the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&byte| byte == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&byte| byte == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc::Crc::<u16>::new(&crc::CRC_16_XMODEM).checksum(hashed) % SLOTS
}

/// The hash tag of the keys all the vouchers of `slot` share (the order sequence, the
/// highest voucher id): the smallest number whose digits hash to it.
pub fn slot_tag(slot: u16) -> u32 {
    SLOT_TAGS[usize::from(slot % SLOTS)]
}

/// The slots each primary serves, as `CLUSTER NODES` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// `(first slot, last slot, "host:port")`, sorted by first slot.
    ranges: Vec<(u16, u16, String)>,
}

impl SlotMap {
    /// Reads `CLUSTER NODES`: a line per node, `<id> <host:port@bus[,name]> <flags>
    /// <primary> <ping> <pong> <epoch> <link> <slot or range>...`. A primary marked failed
    /// serves nothing (its replica is taking over); slots being imported or migrated
    /// (`[...]`) stay with their owner. `None` when no primary serves anything.
    pub fn parse(nodes: &str) -> Option<SlotMap> {
        let mut ranges = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, address, flags, _, _, _, _, _, slots @ ..] = fields.as_slice() else {
                continue;
            };
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master")
                || flags
                    .iter()
                    .any(|flag| ["fail", "noaddr", "handshake"].contains(flag))
            {
                continue;
            }
            let host_port = address.split(['@', ',']).next().unwrap_or_default();
            if host_port.is_empty() || host_port.starts_with(':') {
                continue;
            }
            for slot in slots.iter().filter(|slot| !slot.starts_with('[')) {
                let (first, last) = slot.split_once('-').unwrap_or((slot, slot));
                let (Ok(first), Ok(last)) = (first.parse::<u16>(), last.parse::<u16>()) else {
                    continue;
                };
                if first <= last && last < SLOTS {
                    ranges.push((first, last, host_port.to_string()));
                }
            }
        }
        ranges.sort();
        (!ranges.is_empty()).then_some(SlotMap { ranges })
    }

    /// The primary serving `slot`, as `host:port`.
    pub fn owner(&self, slot: u16) -> Option<&str> {
        let i = self.ranges.partition_point(|(first, _, _)| *first <= slot);
        let (_, last, node) = self.ranges.get(i.checked_sub(1)?)?;
        (slot <= *last).then_some(node.as_str())
    }

    /// Every primary, once each.
    pub fn primaries(&self) -> Vec<&str> {
        let mut nodes: Vec<&str> = self.ranges.iter().map(|(_, _, n)| n.as_str()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
}

/// What a cluster node answered instead of running a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// The slot lives on `node` now: send it there, and read the map again.
    Moved { slot: u16, node: String },
    /// The slot is moving to `node` and the key is there already: send it there once,
    /// after `ASKING`.
    Ask { slot: u16, node: String },
    /// A slot mid-migration holds only some of a script's keys: try again shortly.
    TryAgain,
    /// The cluster cannot serve the slot now (a failover under way).
    ClusterDown,
}

impl Redirect {
    /// Reads an error as Redis words it (`MOVED 3999 127.0.0.1:6381`) or as Spin's Redis
    /// client passes it on (`... - Moved: 3999 127.0.0.1:6381`).
    pub fn parse(message: &str) -> Option<Redirect> {
        let found = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|name| message.find(name).map(|at| &message[at + name.len()..]))
        };
        let target = |rest: &str| {
            let mut words = rest.split_whitespace();
            let slot = words.next()?.parse::<u16>().ok().filter(|s| *s < SLOTS)?;
            // Whatever quotes it (a client's error text) is not the port's.
            let node = words
                .next()?
                .trim_end_matches(|c: char| !c.is_ascii_digit());
            Some((slot, node.to_string()))
        };
        if let Some((slot, node)) = found(["MOVED ", "Moved: "]).and_then(target) {
            return Some(Redirect::Moved { slot, node });
        }
        if let Some((slot, node)) = found(["ASK ", "Ask: "]).and_then(target) {
            return Some(Redirect::Ask { slot, node });
        }
        if found(["TRYAGAIN", "TryAgain"]).is_some() {
            return Some(Redirect::TryAgain);
        }
        found(["CLUSTERDOWN", "ClusterDown"]).map(|_| Redirect::ClusterDown)
    }
}

/// The seed nodes the operator named (`redis_cluster_nodes`): comma-separated
/// `redis://[user:password@]host:port` URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(Vec<String>);

impl Seeds {
    /// `None` for an empty list: a single Redis, no cluster.
    pub fn parse(list: &str) -> Option<Seeds> {
        let seeds: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|seed| !seed.is_empty())
            .map(str::to_string)
            .collect();
        (!seeds.is_empty()).then_some(Seeds(seeds))
    }

    pub fn urls(&self) -> &[String] {
        &self.0
    }

    /// The URL of `node` (`host:port`, as the cluster names it), with the first seed's
    /// scheme and credentials: every node of a cluster takes the same.
    pub fn url(&self, node: &str) -> String {
        let first = &self.0[0];
        let (scheme, rest) = first.split_once("://").unwrap_or(("redis", first));
        let credentials = rest
            .split('/')
            .next()
            .and_then(|authority| authority.rsplit_once('@'))
            .map(|(credentials, _)| format!("{credentials}@"))
            .unwrap_or_default();
        format!("{scheme}://{credentials}{node}")
    }
}

impl fmt::Display for Seeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.join(",").fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // From `CLUSTER KEYSLOT` on redis-server 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"seckill:{42}:voucher"), key_slot(b"42"));
        assert_eq!(key_slot(b"a{}b"), key_slot(b"a{}b"));
        assert_ne!(key_slot(b"a{}b"), key_slot(b""));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    }

    #[test]
    fn each_slot_has_a_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = slot_tag(slot).to_string();
            assert_eq!(key_slot(tag.as_bytes()), slot, "{tag}");
        }
    }

    const NODES: &str = "\
07c3 127.0.0.1:7102@17102 master - 0 1 2 connected 5461-10922 [10923->-e7d1]
e7d1 127.0.0.1:7101@17101,host-a myself,master - 0 0 1 connected 0-5460 10923
9a8b 127.0.0.1:7103@17103 master - 0 1 3 connected 10924-16383
1111 127.0.0.1:7104@17104 slave 07c3 0 1 2 connected
2222 127.0.0.1:7105@17105 master,fail - 0 1 0 disconnected
3333 :0@0 master,noaddr - 0 1 0 disconnected 0-5
";

    #[test]
    fn the_map_names_each_slot_s_primary() {
        let map = SlotMap::parse(NODES).unwrap();
        assert_eq!(map.owner(0), Some("127.0.0.1:7101"));
        assert_eq!(map.owner(5460), Some("127.0.0.1:7101"));
        assert_eq!(map.owner(5461), Some("127.0.0.1:7102"));
        assert_eq!(map.owner(10922), Some("127.0.0.1:7102"));
        assert_eq!(map.owner(10923), Some("127.0.0.1:7101"));
        assert_eq!(map.owner(10924), Some("127.0.0.1:7103"));
        assert_eq!(map.owner(16383), Some("127.0.0.1:7103"));
        assert_eq!(
            map.primaries(),
            ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
        );
        let gap = SlotMap::parse("e 127.0.0.1:1@2 master - 0 0 1 connected 10-20").unwrap();
        assert_eq!((gap.owner(9), gap.owner(21)), (None, None));
        assert_eq!(SlotMap::parse("garbage"), None);
    }

    #[test]
    fn redirects_read_in_either_wording() {
        let moved = Redirect::Moved {
            slot: 3999,
            node: "127.0.0.1:6381".into(),
        };
        assert_eq!(
            Redirect::parse("MOVED 3999 127.0.0.1:6381"),
            Some(moved.clone())
        );
        assert_eq!(
            Redirect::parse("An error was signalled by the server - Moved: 3999 127.0.0.1:6381"),
            Some(moved)
        );
        assert_eq!(
            Redirect::parse(
                "Other(\"An error was signalled by the server - Ask: 7 10.0.0.2:7000\")"
            ),
            Some(Redirect::Ask {
                slot: 7,
                node: "10.0.0.2:7000".into()
            })
        );
        assert_eq!(
            Redirect::parse("An error was signalled by the server - TryAgain: Multiple keys"),
            Some(Redirect::TryAgain)
        );
        assert_eq!(
            Redirect::parse("CLUSTERDOWN The cluster is down"),
            Some(Redirect::ClusterDown)
        );
        assert_eq!(Redirect::parse("NOSCRIPT No matching script"), None);
        assert_eq!(Redirect::parse("MOVED nonsense"), None);
    }

    #[test]
    fn nodes_take_the_seeds_scheme_and_credentials() {
        assert_eq!(Seeds::parse(" , "), None);
        let seeds =
            Seeds::parse("rediss://app:secret@10.0.0.1:7000, redis://10.0.0.2:7000").unwrap();
        assert_eq!(seeds.urls().len(), 2);
        assert_eq!(
            seeds.url("10.0.0.9:7001"),
            "rediss://app:secret@10.0.0.9:7001"
        );
        let plain = Seeds::parse("redis://127.0.0.1:7101").unwrap();
        assert_eq!(plain.url("127.0.0.1:7102"), "redis://127.0.0.1:7102");
    }
}

//! The request's way to the sales' Redis: one server (`redis_url`), or a Redis Cluster
//! named by its seed nodes (`redis_cluster_nodes`), where each command goes to the primary
//! serving its key's slot. Spin's Redis client speaks to one address and follows no
//! redirect, so the component is the cluster's client: it keeps the slot map (`topology`:
//! in Spin's key-value store in the default build, in the instance in the WASIp3 one),
//! and follows `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN` and a failed node's successor as
//! `seckill_core::redis_cluster::delivery` decides: this only sends, waits and reads the map as it
//! is told. Either way, a script that changes a set of vouchers is followed by the set's
//! update (`sale::listings`).

use spin_sdk::redis::Error;
use std::cell::RefCell;
use std::rc::Rc;

use seckill_core::redis::{Arg, Command, Reply};
use seckill_core::redis_cluster::delivery::{Delivery, Step};
use seckill_core::redis_cluster::{key_slot, Redirect, Seeds, SlotMap};
use seckill_core::sale::{listings, Call};

use crate::config::RedisTarget;
use crate::platform::node::Node;
pub use crate::platform::redis_values::RedisError;
use crate::platform::{pause, topology};

pub struct Redis {
    nodes: Nodes,
}

/// A single Redis, or a cluster's primaries.
enum Nodes {
    Single(Node),
    Cluster(Cluster),
}

impl Redis {
    /// A single Redis's connection is opened here; a cluster's nodes when first needed.
    pub async fn connect(target: &'static RedisTarget) -> Result<Redis, RedisError> {
        let nodes = match target {
            RedisTarget::Single(url) => Nodes::Single(Node::connect(url).await?),
            RedisTarget::Cluster(seeds) => Nodes::Cluster(Cluster {
                seeds,
                map: RefCell::new(None),
                nodes: RefCell::new(Vec::new()),
            }),
        };
        Ok(Redis { nodes })
    }

    /// Whether the sale's keys are spread over a cluster's primaries.
    pub fn on_a_cluster(&self) -> bool {
        matches!(self.nodes, Nodes::Cluster(_))
    }

    /// Runs a command, and the updates of the sets of vouchers its reply calls for: a
    /// failed update is noted in the request log, never the command's failure (it ran).
    pub async fn run(&self, command: &Command) -> Result<Vec<Reply>, Error> {
        let reply = self.send(command).await?;
        for listing in listings(command, &reply) {
            if let Err(error) = self.send(&listing).await {
                crate::request_log::note_cause(format!("redis: a set's update failed: {error}"));
            }
        }
        Ok(reply)
    }

    /// Runs `call` and reads its reply.
    pub async fn call<C: Call>(&self, call: &C) -> Result<C::Output, RedisError> {
        Ok(C::parse(self.run(&call.command()).await?)?)
    }

    /// A Redis Cluster's slot map as the cluster tells it now (and kept for the next
    /// requests); `None` for a single Redis. A creation places a sale's buckets by it: the
    /// map kept is refreshed only on a redirect, which a creation's placement never meets.
    pub async fn slot_map(&self) -> Result<Option<SlotMap>, Error> {
        match &self.nodes {
            Nodes::Single(_) => Ok(None),
            Nodes::Cluster(cluster) => cluster.refresh(None).await.map(Some),
        }
    }

    async fn send(&self, command: &Command) -> Result<Vec<Reply>, Error> {
        match &self.nodes {
            Nodes::Single(node) => node.run(command).await,
            Nodes::Cluster(cluster) => cluster.run(command).await,
        }
    }
}

/// A Redis Cluster, as one request reaches it.
struct Cluster {
    seeds: &'static Seeds,
    /// The slot map this request goes by.
    map: RefCell<Option<SlotMap>>,
    /// The nodes this request has connections to, by `host:port`.
    nodes: RefCell<Vec<(String, Rc<Node>)>>,
}

impl Cluster {
    /// Runs `command` where its slot lives, as `redis_cluster::delivery` steers it.
    async fn run(&self, command: &Command) -> Result<Vec<Reply>, Error> {
        let slot = command.key().map(|key| key_slot(key.as_bytes()));
        let (mut delivery, mut step) = Delivery::start(self.owner(slot).await?);
        let mut failure = None;
        loop {
            step = match step {
                Step::Send { node, asking } => {
                    let result = match self.node(&node).await {
                        Ok(open) if asking => open.run_asking(command).await,
                        Ok(open) => open.run(command).await,
                        Err(error) => Err(error),
                    };
                    let error = match result {
                        Ok(reply) => return Ok(reply),
                        Err(error) => error,
                    };
                    let redirect = match &error {
                        Error::Other(message) => Redirect::parse(message),
                        _ => None,
                    };
                    if redirect.is_none() {
                        self.forget(&node);
                    }
                    failure = Some(at(&node, error));
                    delivery.failed(redirect)
                }
                Step::Wait(wait) => {
                    pause(wait).await;
                    delivery.waited()
                }
                Step::ReadMap { from } => {
                    let map = self.refresh(from.as_deref()).await;
                    delivery.mapped(map.ok().and_then(|map| owner_in(&map, slot)))
                }
                Step::GiveUp => {
                    return Err(failure.unwrap_or_else(|| {
                        Error::Other(format!("redis cluster node {}: gave up", delivery.node()))
                    }))
                }
            };
        }
    }

    /// Loads the map the last request read, unless this request has one: once a request,
    /// as in the default build each load reads the key-value store.
    fn load_map(&self) {
        if self.map.borrow().is_none() {
            *self.map.borrow_mut() = topology::load();
        }
    }

    /// The primary serving `slot` (any primary for a command without a key), by the map
    /// this request, or the last one, read; read again when that names none (a failover
    /// under way when it was read).
    async fn owner(&self, slot: Option<u16>) -> Result<String, Error> {
        self.load_map();
        let known = self
            .map
            .borrow()
            .as_ref()
            .and_then(|map| owner_in(map, slot));
        if let Some(owner) = known {
            return Ok(owner);
        }
        let map = self.refresh(None).await?;
        owner_in(&map, slot).ok_or_else(|| {
            Error::Other(format!(
                "redis cluster: no primary serves slot {}",
                slot.unwrap_or_default()
            ))
        })
    }

    /// Reads the slot map from `first`, else from the seeds in turn, and keeps it for
    /// this request and the next ones.
    async fn refresh(&self, first: Option<&str>) -> Result<SlotMap, Error> {
        let read = Command::plain("CLUSTER", vec![Arg::from("NODES")]);
        let mut failure = Error::Other("redis cluster: no seed node named".into());
        let seeds = self.seeds.urls().iter().map(String::as_str);
        for url in first
            .map(|node| self.seeds.url(node))
            .iter()
            .map(String::as_str)
            .chain(seeds)
        {
            let nodes = match Node::connect(url).await {
                Ok(node) => node.run(&read).await,
                Err(error) => Err(error),
            };
            let text = match nodes {
                Ok(reply) => match reply.as_slice() {
                    [Reply::Bytes(text)] => String::from_utf8_lossy(text).into_owned(),
                    _ => continue,
                },
                Err(error) => {
                    failure = error;
                    continue;
                }
            };
            if let Some(map) = SlotMap::parse(&text) {
                topology::store(&text);
                *self.map.borrow_mut() = Some(map.clone());
                return Ok(map);
            }
        }
        Err(failure)
    }

    /// This request's connection to `node` (`host:port`), opened when first needed.
    async fn node(&self, node: &str) -> Result<Rc<Node>, Error> {
        let open = self
            .nodes
            .borrow()
            .iter()
            .find(|(name, _)| name == node)
            .map(|(_, n)| n.clone());
        if let Some(open) = open {
            return Ok(open);
        }
        let opened = Rc::new(Node::connect(&self.seeds.url(node)).await?);
        self.nodes
            .borrow_mut()
            .push((node.to_string(), opened.clone()));
        Ok(opened)
    }

    fn forget(&self, node: &str) {
        self.nodes.borrow_mut().retain(|(name, _)| name != node);
    }
}

/// `error`, naming the node that answered it, for the request log.
fn at(node: &str, error: Error) -> Error {
    Error::Other(format!("redis cluster node {node}: {error}"))
}

/// The primary serving `slot` in `map`: a keyless command goes to the first.
fn owner_in(map: &SlotMap, slot: Option<u16>) -> Option<String> {
    match slot {
        Some(slot) => map.owner(slot),
        None => map.primaries().first().copied(),
    }
    .map(str::to_string)
}

//! One Redis server, on Spin's outbound Redis API: the connection a request opens to it.
//! The storage's `Redis` routes the sale's commands to it (a single Redis, or a cluster's node).

use spin_sdk::redis::{self, Connection};

use seckill_core::redis::{Command, Reply};

use crate::platform::redis_values;

/// One request's connection to one Redis server.
pub struct Node {
    connection: Connection,
}

impl Node {
    /// Spin opens a new connection per `open`, so a request opens one per server and
    /// reuses it.
    pub async fn connect(url: &str) -> Result<Node, redis::Error> {
        Ok(Node {
            connection: Connection::open(url)?,
        })
    }

    /// Runs a command: one round trip, or two for a script Redis has forgotten (the
    /// EVAL caches it again, so the next EVALSHA finds it).
    pub async fn run(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        self.execute(command, false).await
    }

    /// Runs a command on a cluster node importing its slot, which takes it only right
    /// after `ASKING` (the previous command on the same connection: a request's
    /// commands go out one at a time).
    pub async fn run_asking(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        self.execute(command, true).await
    }

    /// [`crate::platform::redis_values::execute`] on Spin's blocking call.
    async fn execute(&self, command: &Command, asking: bool) -> Result<Vec<Reply>, redis::Error> {
        redis_values::execute(command, asking, |name, parameters| {
            std::future::ready(self.connection.execute(name, &parameters))
        })
        .await
    }
}

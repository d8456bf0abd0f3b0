//! One Redis server, on Spin's outbound Redis API: the connection a request opens to it.
//! The storage's `Redis` routes the sale's commands to it (a single Redis, or a cluster's node).

use spin_sdk::redis::{self, Connection};

use seckill_core::redis::{is_noscript, Command, Reply};

use crate::redis_values::{from_spin, parameters};

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
        execute(&self.connection, command, false).await
    }

    /// Runs a command on a cluster node importing its slot, which takes it only right
    /// after `ASKING` (the previous command on the same connection: a request's
    /// commands go out one at a time).
    pub async fn run_asking(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        execute(&self.connection, command, true).await
    }
}

async fn execute(
    connection: &Connection,
    command: &Command,
    asking: bool,
) -> Result<Vec<Reply>, redis::Error> {
    command
        .send_with(
            |name, args| async move {
                if asking {
                    connection.execute("ASKING", &[])?;
                }
                connection.execute(name, &parameters(args))
            },
            |error| matches!(error, redis::Error::Other(message) if is_noscript(message)),
        )
        .await
        .map(|reply| reply.into_iter().map(from_spin).collect())
}

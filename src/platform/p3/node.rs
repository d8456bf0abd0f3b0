//! One Redis server on Spin 4's async Redis API, on the connection the instance keeps to
//! it: the storage's `Redis` routes the sale's commands here (a single Redis, or a cluster's
//! node).
//!
//! The instance's first request to a server opens it; the requests the instance serves at
//! once share it (Spin's Redis connection is multiplexed: their commands are pipelined on
//! it), and the others wait for that one open rather than each opening their own. A call that
//! fails drops the connection (it may be a Redis restarted under it: the connection never
//! reconnects by itself), and the next call opens a new one.
//!
//! A failed call is sent again, on a new connection, only when it was its request's first
//! and went out on a connection an earlier request had opened: a connection that died
//! while the instance waited, which the p1 build, opening one per request, never meets.
//! Sent again there, it is what the buyer's next press would send, which every script is
//! written to take (a lost reply). Any other failure is the request's: an `EVALSHA` whose
//! reply was lost may have run, and the decisions already handle that. A blocking command
//! (`BLPOP`) runs on a connection of its request's own, so that it holds up nobody else's
//! commands; a request that ends gives that connection back to the instance for the next
//! waiter, and a waiter's first `BLPOP` on one fails over to a new one as above (popped
//! and lost, a purchase's outcome costs its buyer a `busy` and a press, never a promise).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::lock::Mutex;
use spin_sdk::redis::{self, Connection};

use seckill_core::redis::{Command, Reply};

use crate::platform::redis_values;

thread_local! {
    /// The instance's connections, one per server, with their addresses.
    static SHARED: RefCell<Vec<(String, Rc<Connection>)>> = const { RefCell::new(Vec::new()) };
    /// Held while the shared connection is being opened.
    static OPENING: Rc<Mutex<()>> = Rc::new(Mutex::new(()));
    /// Connections for blocking commands that finished requests gave back, with their
    /// addresses.
    static WAITERS: RefCell<Vec<(String, Rc<Connection>)>> = const { RefCell::new(Vec::new()) };
}

/// The most connections for blocking commands an instance keeps: Spin's default number
/// of requests at once per instance.
const KEPT_WAITERS: usize = 16;

/// One request's way to one Redis server: the instance's connection, and its own for
/// blocking commands, opened on first use.
pub struct Node {
    url: String,
    shared: RefCell<Rc<Connection>>,
    /// Whether `shared` was opened by an earlier request, and nothing has been sent yet.
    untried: Cell<bool>,
    own: RefCell<Option<Rc<Connection>>>,
    /// A blocking command is in flight on `own`: it is nobody else's to use.
    waiting: Cell<bool>,
    /// The request's connection for commands sent after `ASKING`.
    asking: RefCell<Option<Rc<Connection>>>,
}

impl Node {
    pub async fn connect(url: &str) -> Result<Node, redis::Error> {
        let (shared, kept) = shared(url).await?;
        Ok(Node {
            url: url.to_string(),
            shared: RefCell::new(shared),
            untried: Cell::new(kept),
            own: RefCell::new(None),
            waiting: Cell::new(false),
            asking: RefCell::new(None),
        })
    }

    /// Runs a command (see the module's notes on failures).
    pub async fn run(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        if command.blocks() {
            let (own, kept) = self.own().await?;
            self.waiting.set(true);
            let result = match execute(&own, command, false).await {
                Err(_) if kept => match self.open_own().await {
                    Ok(fresh) => execute(&fresh, command, false).await,
                    Err(error) => Err(error),
                },
                result => result,
            };
            self.waiting.set(false);
            if result.is_err() {
                self.own.borrow_mut().take();
            }
            return result;
        }
        let untried = self.untried.replace(false);
        let connection = self.shared.borrow().clone();
        let result = match execute(&connection, command, false).await {
            Err(_) if untried => {
                forget(&connection);
                let (fresh, _) = shared(&self.url).await?;
                *self.shared.borrow_mut() = fresh.clone();
                execute(&fresh, command, false).await
            }
            result => result,
        };
        if result.is_err() {
            forget(&self.shared.borrow());
        }
        result
    }

    /// Runs a command on a cluster node importing its slot, which takes it only right
    /// after `ASKING` on the same connection: the request's own, so that no other
    /// request's command comes between, kept for its next one (a command refused
    /// `TRYAGAIN` there is sent again after each wait until the migration ends).
    pub async fn run_asking(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        let kept = self.asking.borrow().clone();
        let connection = match kept {
            Some(connection) => connection,
            None => {
                let opened = Rc::new(Connection::open(&self.url).await?);
                *self.asking.borrow_mut() = Some(opened.clone());
                opened
            }
        };
        execute(&connection, command, true).await
    }

    /// The request's connection for blocking commands, and whether an earlier request
    /// left it (untried by this one).
    async fn own(&self) -> Result<(Rc<Connection>, bool), redis::Error> {
        if let Some(own) = self.own.borrow().clone() {
            return Ok((own, false));
        }
        let kept = WAITERS.with_borrow_mut(|waiters| {
            let i = waiters
                .iter()
                .position(|(address, _)| *address == self.url)?;
            Some(waiters.swap_remove(i).1)
        });
        if let Some(kept) = kept {
            *self.own.borrow_mut() = Some(kept.clone());
            return Ok((kept, true));
        }
        Ok((self.open_own().await?, false))
    }

    async fn open_own(&self) -> Result<Rc<Connection>, redis::Error> {
        let own = Rc::new(Connection::open(&self.url).await?);
        *self.own.borrow_mut() = Some(own.clone());
        Ok(own)
    }
}

/// A request's connection for blocking commands goes back to the instance, unless a
/// command is still in flight on it (a request cut off while it waited).
impl Drop for Node {
    fn drop(&mut self) {
        let Some(own) = self.own.get_mut().take() else {
            return;
        };
        if self.waiting.get() {
            return;
        }
        WAITERS.with_borrow_mut(|waiters| {
            if waiters.len() < KEPT_WAITERS {
                waiters.push((std::mem::take(&mut self.url), own));
            }
        });
    }
}

/// Runs `command` on `connection` ([`crate::platform::redis_values::execute`]).
async fn execute(
    connection: &Connection,
    command: &Command,
    asking: bool,
) -> Result<Vec<Reply>, redis::Error> {
    redis_values::execute(command, asking, |name, parameters| {
        connection.execute(name, parameters)
    })
    .await
}

/// The instance's connection to `url`, opened if it has none, and whether it was kept
/// (opened by an earlier request).
async fn shared(url: &str) -> Result<(Rc<Connection>, bool), redis::Error> {
    let kept = || {
        SHARED.with_borrow(|shared| {
            shared
                .iter()
                .find(|(address, _)| address == url)
                .map(|(_, connection)| connection.clone())
        })
    };
    if let Some(connection) = kept() {
        return Ok((connection, true));
    }
    let opening = OPENING.with(Rc::clone);
    let _opening = opening.lock().await;
    // Another request may have opened it while this one waited: new to both.
    if let Some(connection) = kept() {
        return Ok((connection, false));
    }
    let connection = Rc::new(Connection::open(url).await?);
    SHARED.with_borrow_mut(|shared| shared.push((url.to_string(), connection.clone())));
    Ok((connection, false))
}

/// Drops `failed` as the instance's connection to its server, unless another has
/// replaced it already.
fn forget(failed: &Rc<Connection>) {
    SHARED.with_borrow_mut(|shared| {
        shared.retain(|(_, connection)| !Rc::ptr_eq(connection, failed));
    });
}

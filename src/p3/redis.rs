//! Runs the sale's Redis calls (`seckill_core::sale`: a type per script, with its reply)
//! on Spin 4's async Redis API, on the connection the instance keeps.
//!
//! The instance's first request opens it; the requests the instance serves at once share
//! it (Spin's Redis connection is multiplexed: their commands are pipelined on it), and
//! the others wait for that one open rather than each opening their own. A call that
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

use seckill_core::redis::{is_noscript, Command, Reply};
use seckill_core::sale::Call;

pub use crate::redis_values::RedisError;
use crate::redis_values::{from_spin, parameters};

thread_local! {
    /// The instance's connection, and the address it was opened to.
    static SHARED: RefCell<Option<(String, Rc<Connection>)>> = const { RefCell::new(None) };
    /// Held while the shared connection is being opened.
    static OPENING: Rc<Mutex<()>> = Rc::new(Mutex::new(()));
    /// Connections for blocking commands that finished requests gave back, with their
    /// addresses.
    static WAITERS: RefCell<Vec<(String, Rc<Connection>)>> = const { RefCell::new(Vec::new()) };
}

/// The most connections for blocking commands an instance keeps: Spin's default number
/// of requests at once per instance.
const KEPT_WAITERS: usize = 16;

/// One request's way to Redis: the instance's connection, and its own for blocking
/// commands, opened on first use.
pub struct Redis {
    url: String,
    shared: RefCell<Rc<Connection>>,
    /// Whether `shared` was opened by an earlier request, and nothing has been sent yet.
    untried: Cell<bool>,
    own: RefCell<Option<Rc<Connection>>>,
    /// A blocking command is in flight on `own`: it is nobody else's to use.
    waiting: Cell<bool>,
}

impl Redis {
    pub async fn connect(url: &str) -> Result<Redis, RedisError> {
        let (shared, kept) = shared(url).await?;
        Ok(Redis {
            url: url.to_string(),
            shared: RefCell::new(shared),
            untried: Cell::new(kept),
            own: RefCell::new(None),
            waiting: Cell::new(false),
        })
    }

    /// Runs a command (see the module's notes on failures).
    pub async fn run(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        if command.blocks() {
            let (own, kept) = self.own().await?;
            self.waiting.set(true);
            let result = match execute(&own, command).await {
                Err(_) if kept => match self.open_own().await {
                    Ok(fresh) => execute(&fresh, command).await,
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
        let result = match execute(&connection, command).await {
            Err(_) if untried => {
                forget(&connection);
                let (fresh, _) = shared(&self.url).await?;
                *self.shared.borrow_mut() = fresh.clone();
                execute(&fresh, command).await
            }
            result => result,
        };
        if result.is_err() {
            forget(&self.shared.borrow());
        }
        result
    }

    /// Runs `call` and reads its reply.
    pub async fn call<C: Call>(&self, call: &C) -> Result<C::Output, RedisError> {
        Ok(call.parse(self.run(&call.command()).await?)?)
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
impl Drop for Redis {
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

/// Runs `command` on `connection`: one round trip, or two for a script Redis has
/// forgotten (the EVAL caches it again, so the next EVALSHA finds it).
async fn execute(connection: &Connection, command: &Command) -> Result<Vec<Reply>, redis::Error> {
    command
        .send_with(
            |name, args| connection.execute(name, parameters(args)),
            |error| matches!(error, redis::Error::Other(message) if is_noscript(message)),
        )
        .await
        .map(|reply| reply.into_iter().map(from_spin).collect())
}

/// The instance's connection to `url`, opened if it has none, and whether it was kept
/// (opened by an earlier request).
async fn shared(url: &str) -> Result<(Rc<Connection>, bool), redis::Error> {
    let kept = || {
        SHARED.with_borrow(|shared| {
            shared
                .as_ref()
                .filter(|(address, _)| address == url)
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
    SHARED.set(Some((url.to_string(), connection.clone())));
    Ok((connection, false))
}

/// Drops `failed` as the instance's connection, unless another has replaced it already.
fn forget(failed: &Rc<Connection>) {
    SHARED.with_borrow_mut(|shared| {
        if shared
            .as_ref()
            .is_some_and(|(_, connection)| Rc::ptr_eq(connection, failed))
        {
            *shared = None;
        }
    });
}

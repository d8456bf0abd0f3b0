//! MySQL on Spin 4's async MySQL API (`spin:mysql/mysql@3.0.0`, bound here from its WIT
//! in `wit/`), on connections the instance keeps between requests: Spin makes a new
//! connection pool, so a new handshake, on every `open`.
//!
//! A connection runs one statement at a time, so each request that needs MySQL holds a
//! connection of its own while it does: an idle one the instance kept, else a new one.
//! When the request ends its connection goes back to the instance, if the instance serves
//! no other request then (at most [`KEPT`] idle): a buyer alone, or requests one after
//! another, reuse it and skip the handshake, while a crowd's instances, which drain the
//! group commit in turns, close theirs rather than each keep one (a sale's MySQL
//! connections stay those in use). One whose call failed or was cut off is dropped. A kept
//! connection may have died while it idled (MySQL restarted, or closed it): a failed
//! call that was its first use in this request is sent again on a new connection, as
//! the buyer's next press would send it (every write is written to take a lost reply).
//!
//! A connection is closed only while no MySQL call of the instance is under way: Spin
//! 4.0.2 holds the instance's MySQL state locked while it opens a connection, and closing
//! one (a resource drop, which stops the whole instance until the host is done) waits for
//! that lock, while the open holding it waits for the instance to run again: the
//! instance would hang. Until then a sound connection waits among the idle ones (the
//! next request to need one takes it), a failed one among those to close.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;

mod bindings {
    wit_bindgen::generate!({
        path: "src/platform/p3/wit",
        world: "seckill:p3/mysql",
        generate_all,
    });
}

use bindings::spin::mysql::mysql as v3;
pub use v3::{DbValue, Error, ParameterValue};

/// The most idle connections an instance keeps: one is given back only by a request the
/// instance serves alone.
const KEPT: usize = 1;

thread_local! {
    /// The instance's idle connections, with their addresses.
    static IDLE: RefCell<Vec<(String, Rc<v3::Connection>)>> = const { RefCell::new(Vec::new()) };
    /// The instance's MySQL calls under way (opens included).
    static CALLS: Cell<usize> = const { Cell::new(0) };
    /// Failed connections to close once no call is under way.
    static CLOSING: RefCell<Vec<Rc<v3::Connection>>> = const { RefCell::new(Vec::new()) };
}

/// Runs a call into Spin's MySQL, counted in [`CALLS`] while it is under way (or until it
/// is cut off).
async fn calling<T>(call: impl Future<Output = T>) -> T {
    struct UnderWay;
    impl Drop for UnderWay {
        fn drop(&mut self) {
            CALLS.set(CALLS.get() - 1);
            close_pending();
        }
    }
    CALLS.set(CALLS.get() + 1);
    let _under_way = UnderWay;
    call.await
}

/// Closes the failed `connection` now if no call is under way, else once none is.
fn close(connection: Rc<v3::Connection>) {
    CLOSING.with_borrow_mut(|closing| closing.push(connection));
    close_pending();
}

/// Keeps the sound `connection` to `url` idle for the instance's next requests, or closes
/// it (see the module's notes).
fn give_back(url: String, connection: Rc<v3::Connection>) {
    IDLE.with_borrow_mut(|idle| idle.push((url, connection)));
    close_pending();
}

/// While no call is under way, closes the failed connections and the idle ones past what
/// the instance keeps: [`KEPT`] while it serves one request, none while it serves more.
fn close_pending() {
    if CALLS.get() > 0 {
        return;
    }
    let keep = if super::serving() > 1 { 0 } else { KEPT };
    let surplus = IDLE.with_borrow_mut(|idle| idle.split_off(keep.min(idle.len())));
    drop(surplus);
    drop(CLOSING.take());
}

async fn open_new(url: &str) -> Result<Rc<v3::Connection>, Error> {
    Ok(Rc::new(
        calling(v3::Connection::open(url.to_string())).await?,
    ))
}

/// A request's connection.
pub struct Connection {
    url: String,
    held: RefCell<Option<Rc<v3::Connection>>>,
    /// `held` was kept from an earlier request, and this one has not used it yet.
    untried: Cell<bool>,
    /// A call is in flight on `held`.
    busy: Cell<bool>,
}

impl Connection {
    pub async fn open(url: &str) -> Result<Connection, Error> {
        let kept = IDLE.with_borrow_mut(|idle| {
            let i = idle.iter().position(|(address, _)| address == url)?;
            Some(idle.swap_remove(i).1)
        });
        let untried = kept.is_some();
        let held = match kept {
            Some(kept) => kept,
            None => open_new(url).await?,
        };
        Ok(Connection {
            url: url.to_string(),
            held: RefCell::new(Some(held)),
            untried: Cell::new(untried),
            busy: Cell::new(false),
        })
    }

    pub async fn query(
        &self,
        statement: &str,
        params: &[ParameterValue],
    ) -> Result<Vec<Vec<DbValue>>, Error> {
        self.run(|connection| {
            calling(async move {
                let (_, rows, done) = connection
                    .query(statement.to_string(), params.to_vec())
                    .await?;
                let rows = rows.collect().await;
                done.await?;
                Ok(rows)
            })
        })
        .await
    }

    pub async fn execute(&self, statement: &str, params: &[ParameterValue]) -> Result<(), Error> {
        self.run(|connection| {
            calling(async move {
                connection
                    .execute(statement.to_string(), params.to_vec())
                    .await
            })
        })
        .await
    }

    /// Runs `call` on the request's connection (see the module's notes on failures).
    async fn run<T, F: Future<Output = Result<T, Error>>>(
        &self,
        call: impl Fn(Rc<v3::Connection>) -> F,
    ) -> Result<T, Error> {
        let held = self.held.borrow().clone();
        let (connection, untried) = match held {
            Some(held) => (held, self.untried.replace(false)),
            None => (self.reopen().await?, false),
        };
        self.busy.set(true);
        let mut result = call(connection).await;
        if result.is_err() && untried {
            result = match self.reopen().await {
                Ok(fresh) => call(fresh).await,
                Err(error) => Err(error),
            };
        }
        self.busy.set(false);
        if result.is_err() {
            self.forget();
        }
        result
    }

    async fn reopen(&self) -> Result<Rc<v3::Connection>, Error> {
        self.forget();
        let fresh = open_new(&self.url).await?;
        *self.held.borrow_mut() = Some(fresh.clone());
        Ok(fresh)
    }

    /// Closes the request's connection, if it has one.
    fn forget(&self) {
        if let Some(held) = self.held.borrow_mut().take() {
            close(held);
        }
    }
}

/// The connection goes back to the instance, unless a call was cut off on it.
impl Drop for Connection {
    fn drop(&mut self) {
        let Some(held) = self.held.get_mut().take() else {
            return;
        };
        if self.busy.get() {
            return close(held);
        }
        give_back(std::mem::take(&mut self.url), held);
    }
}

//! MySQL on Spin 4's async MySQL API (`spin:mysql/mysql@3.0.0`, bound here from its WIT
//! in `wit/`), on connections the instance keeps between requests: Spin makes a new
//! connection pool, so a new handshake, on every `open`.
//!
//! A connection runs one statement at a time, so each request that needs MySQL holds a
//! connection of its own while it does: an idle one the instance kept, else a new one.
//! When the request ends its connection goes back to the instance, which keeps at most
//! [`KEPT`] idle; one whose call failed or was cut off is dropped instead. A kept
//! connection may have died while it idled (MySQL restarted, or closed it): a failed
//! call that was its first use in this request is sent again on a new connection, as
//! the buyer's next press would send it (every write is written to take a lost reply).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;

mod bindings {
    wit_bindgen::generate!({
        path: "src/p3/wit",
        world: "seckill:p3/mysql",
        generate_all,
    });
}

use bindings::spin::mysql::mysql as v3;
pub use v3::{DbValue, Error, ParameterValue};

/// The most idle connections an instance keeps: a sale needs two at once at most (its
/// group commit's drainer, and a sweep or an audit), whatever the requests in flight.
const KEPT: usize = 2;

thread_local! {
    /// The instance's idle connections, with their addresses.
    static IDLE: RefCell<Vec<(String, Rc<v3::Connection>)>> = const { RefCell::new(Vec::new()) };
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
            None => Rc::new(v3::Connection::open(url.to_string()).await?),
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
        self.run(|connection| async move {
            let (_, rows, done) = connection
                .query(statement.to_string(), params.to_vec())
                .await?;
            let rows = rows.collect().await;
            done.await?;
            Ok(rows)
        })
        .await
    }

    pub async fn execute(&self, statement: &str, params: &[ParameterValue]) -> Result<(), Error> {
        self.run(|connection| async move {
            connection
                .execute(statement.to_string(), params.to_vec())
                .await
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
            self.held.borrow_mut().take();
        }
        result
    }

    async fn reopen(&self) -> Result<Rc<v3::Connection>, Error> {
        self.held.borrow_mut().take();
        let fresh = Rc::new(v3::Connection::open(self.url.clone()).await?);
        *self.held.borrow_mut() = Some(fresh.clone());
        Ok(fresh)
    }
}

/// The connection goes back to the instance, unless a call was cut off on it.
impl Drop for Connection {
    fn drop(&mut self) {
        let Some(held) = self.held.get_mut().take() else {
            return;
        };
        if self.busy.get() {
            return;
        }
        IDLE.with_borrow_mut(|idle| {
            if idle.len() < KEPT {
                idle.push((std::mem::take(&mut self.url), held));
            }
        });
    }
}

//! Spin's own floors, for the benchmark only (never a route of the product). Each route
//! does the least a seckill request of its kind must do, so nothing seckill does on that
//! path can be cheaper under the same Spin:
//!
//! - `GET /redis` sends one PING to Redis (at `redis_url`, as seckill reads it): the
//!   floor of a request that uses Redis;
//! - `GET /mysql` opens a MySQL connection (from `mysql_url`) and runs `SELECT 1`: the
//!   floor of a request that uses MySQL;
//! - `GET /variables` reads the two variables and answers like the floor below, so that
//!   the difference is what looking variables up costs;
//! - anything else answers 200 at once, with no backend and no variable: Spin's floor.
//!
//! Two builds, as seckill has: for `wasm32-wasip1` ([`p1`], Spin 2's interfaces) every
//! request opens its connections, as every Spin 2 component must: Spin's p2 floor. For
//! `wasm32-wasip2` ([`p3`], WASIp3 on Spin 4), whose instances Spin reuses, `/redis` keeps
//! the instance's connection, which is all the WASIp3 seckill keeps: the p3 floor. It
//! also answers `GET /mysql/kept`, `SELECT 1` on a MySQL connection the instance keeps,
//! which measures what keeping one would save.

#[cfg(not(target_env = "p2"))]
mod p1;
#[cfg(target_env = "p2")]
mod p3;

use spin_sdk::mysql;

/// What a request asks of the backends.
enum Route {
    Redis,
    Mysql,
    MysqlKept,
    Variables,
    Nothing,
}

impl Route {
    fn of(path: &str) -> Route {
        match path {
            "/redis" => Route::Redis,
            "/mysql" => Route::Mysql,
            "/mysql/kept" => Route::MysqlKept,
            "/variables" => Route::Variables,
            _ => Route::Nothing,
        }
    }
}

fn select_one(mysql: &mysql::Connection) -> Result<(), String> {
    let rows = mysql
        .query("SELECT 1", &[])
        .map_err(|e| e.to_string())?
        .rows;
    match rows.as_slice() {
        [row] if row.len() == 1 => Ok(()),
        other => Err(format!("unexpected SELECT 1 reply {other:?}")),
    }
}

fn open_mysql(url: &str) -> Result<mysql::Connection, String> {
    mysql::Connection::open(url).map_err(|e| e.to_string())
}

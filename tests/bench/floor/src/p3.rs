//! The p3 floor: the instance keeps its Redis connection (and, for `/mysql/kept`, a
//! MySQL one) across the requests Spin gives it, several at once as it serves seckill's
//! WASIp3 build. Its MySQL calls are spin-sdk 6's synchronous ones: they stop the
//! instance, so no two requests use the kept connection at once.

use std::cell::RefCell;
use std::rc::Rc;

use spin_sdk::http::{IntoResponse, Request};
use spin_sdk::http_service;
use spin_sdk::wasip3::http::types::{ErrorCode, Response};
use spin_sdk::{mysql, redis, variables};

use crate::{open_mysql, select_one, Route};

thread_local! {
    static REDIS: RefCell<Option<Rc<redis::Connection>>> = const { RefCell::new(None) };
    static MYSQL: RefCell<Option<Rc<mysql::Connection>>> = const { RefCell::new(None) };
}

#[http_service]
async fn handle(request: Request) -> Result<Response, ErrorCode> {
    let path = request.uri().path().to_string();
    let reply = match Route::of(&path) {
        Route::Redis => ping().await,
        Route::Mysql => match variable("mysql_url").await {
            Ok(url) => open_mysql(&url).and_then(|mysql| select_one(&mysql)),
            Err(error) => Err(error),
        },
        Route::MysqlKept => kept_mysql()
            .await
            .and_then(|mysql| select_one(&mysql))
            .inspect_err(|_| MYSQL.set(None)),
        Route::Variables => match variable("redis_url").await {
            Ok(_) => variable("mysql_url").await.map(drop),
            Err(error) => Err(error),
        },
        Route::Nothing => Ok(()),
    };
    let (status, body) = match reply {
        Ok(()) => (200, String::new()),
        Err(error) => (503, error),
    };
    ::http::Response::builder()
        .status(status)
        .header("content-length", body.len().to_string())
        .body(body)
        .map_err(|error| ErrorCode::InternalError(Some(error.to_string())))?
        .into_response()
}

/// PING on the instance's connection, opened by its first request; dropped when it
/// fails, so that the next request opens another.
async fn ping() -> Result<(), String> {
    let redis = match REDIS.with_borrow(Clone::clone) {
        Some(redis) => redis,
        None => {
            let url = variable("redis_url").await?;
            let redis = Rc::new(
                redis::Connection::open(url)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            REDIS.set(Some(redis.clone()));
            redis
        }
    };
    let reply = redis.execute("PING", []).await;
    if reply.is_err() {
        REDIS.set(None);
    }
    match reply.map_err(|e| e.to_string())?.as_slice() {
        [redis::RedisResult::Status(pong)] if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}

async fn kept_mysql() -> Result<Rc<mysql::Connection>, String> {
    if let Some(mysql) = MYSQL.with_borrow(Clone::clone) {
        return Ok(mysql);
    }
    let mysql = Rc::new(open_mysql(&variable("mysql_url").await?)?);
    MYSQL.set(Some(mysql.clone()));
    Ok(mysql)
}

async fn variable(name: &str) -> Result<String, String> {
    variables::get(name).await.map_err(|e| e.to_string())
}
